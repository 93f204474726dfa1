package node

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
)

func imageWith(entry, cmd []string) images.Image {
	return images.Image{Ref: "x", Root: "/nonexistent", Entrypoint: entry, Cmd: cmd}
}

func TestMountPlan(t *testing.T) {
	vols := map[string]volumeInfo{"data": {Path: "/v/data"}, "tls": {Path: "/v/tls", ReadOnly: true}}
	files := podFiles{Hosts: "/p/hosts", Resolv: "/p/resolv", NSSwitch: "/p/nss", Hostname: "/p/hostname"}
	etc := []container.Mount{
		{Source: "/p/hosts", Target: "/etc/hosts", File: true}, {Source: "/p/resolv", Target: "/etc/resolv.conf", File: true},
		{Source: "/p/nss", Target: "/etc/nsswitch.conf", File: true}, {Source: "/p/hostname", Target: "/etc/hostname", File: true},
	}
	tests := []struct {
		name    string
		mounts  []corev1.VolumeMount
		msgPath string
		want    []container.Mount
		wantErr bool
	}{
		{
			name:   "volumes, subPath, readOnly, etc files, termination log; parents first",
			mounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/var/lib/etcd/tls/"}, {Name: "data", MountPath: "/var/lib/etcd", SubPath: "member"}, {Name: "data", MountPath: "/ro", ReadOnly: true}},
			want: append(append([]container.Mount{{Source: "/v/data", Target: "/ro", ReadOnly: true}}, etc...),
				container.Mount{Source: "/log", Target: "/dev/termination-log", File: true},
				container.Mount{Source: "/v/data/member", Target: "/var/lib/etcd"},
				container.Mount{Source: "/v/tls", Target: "/var/lib/etcd/tls", ReadOnly: true}),
		},
		{
			name:    "custom termination message path",
			msgPath: "/tmp/msg",
			want:    append(append([]container.Mount{}, etc...), container.Mount{Source: "/log", Target: "/tmp/msg", File: true}),
		},
		{
			name:   "a volume at /etc replaces the etc files",
			mounts: []corev1.VolumeMount{{Name: "data", MountPath: "/etc"}},
			want:   []container.Mount{{Source: "/v/data", Target: "/etc"}, {Source: "/log", Target: "/dev/termination-log", File: true}},
		},
		{name: "subPath escaping the volume", mounts: []corev1.VolumeMount{{Name: "data", MountPath: "/x", SubPath: "../etc"}}, wantErr: true},
		{name: "unknown volume", mounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/x"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{VolumeMounts: tt.mounts, TerminationMessagePath: tt.msgPath}
			got, err := mountPlan(c, vols, files, "/log", nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestContainerIdentity(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0::/:/x\nnonroot:x:65532:65532::/:/x\napp:x:1000:1001::/:/x\n"
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name    string
		user    string
		psc     *corev1.PodSecurityContext
		csc     *corev1.SecurityContext
		want    identity
		wantErr bool
	}{
		{name: "root by default", want: identity{}},
		{name: "image uid:gid", user: "65532:65532", want: identity{UID: 65532, GID: 65532}},
		{name: "image user name", user: "app", want: identity{UID: 1000, GID: 1001}},
		{name: "runAsUser takes the passwd group", psc: &corev1.PodSecurityContext{RunAsUser: i64(65532)}, want: identity{UID: 65532, GID: 65532}},
		{
			name: "container overrides pod; fsGroup and supplementalGroups",
			psc:  &corev1.PodSecurityContext{RunAsUser: i64(1), RunAsGroup: i64(2), FSGroup: i64(3), SupplementalGroups: []int64{4}},
			csc:  &corev1.SecurityContext{RunAsUser: i64(5)},
			want: identity{UID: 5, GID: 2, Groups: []uint32{4, 3}},
		},
		{name: "runAsNonRoot refuses root", csc: &corev1.SecurityContext{RunAsNonRoot: ptrBool(true)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: tt.psc}}
			got, err := containerIdentity(pod, &corev1.Container{SecurityContext: tt.csc}, images.Image{Root: root, User: tt.user})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func ptrBool(b bool) *bool { return &b }

func TestCrashBackoff(t *testing.T) {
	maxDelay := 5 * time.Minute
	tests := []struct {
		current, ranFor, wantDelay, wantNext time.Duration
	}{
		{0, time.Second, 0, 10 * time.Second},
		{10 * time.Second, time.Second, 10 * time.Second, 20 * time.Second},
		{160 * time.Second, time.Second, 160 * time.Second, maxDelay},
		{maxDelay, time.Second, maxDelay, maxDelay},
		{maxDelay, 11 * time.Minute, 0, 10 * time.Second},
	}
	for _, tt := range tests {
		delay, next := crashBackoff(tt.current, tt.ranFor, maxDelay)
		if delay != tt.wantDelay || next != tt.wantNext {
			t.Errorf("crashBackoff(%s, %s) = %s, %s; want %s, %s", tt.current, tt.ranFor, delay, next, tt.wantDelay, tt.wantNext)
		}
	}
}

func TestPodPhase(t *testing.T) {
	run := containerView{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	done := func(code int32) containerView {
		return containerView{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	backoff := containerView{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	creating := containerView{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	tests := []struct {
		name       string
		policy     corev1.RestartPolicy
		init, ctrs []containerView
		want       corev1.PodPhase
	}{
		{"init running", corev1.RestartPolicyAlways, []containerView{run}, []containerView{creating}, corev1.PodPending},
		{"init failed, Never", corev1.RestartPolicyNever, []containerView{done(1)}, []containerView{creating}, corev1.PodFailed},
		{"init failed, OnFailure retries", corev1.RestartPolicyOnFailure, []containerView{done(1)}, []containerView{creating}, corev1.PodPending},
		{"running", corev1.RestartPolicyAlways, []containerView{done(0)}, []containerView{run}, corev1.PodRunning},
		{"one still creating", corev1.RestartPolicyAlways, nil, []containerView{run, creating}, corev1.PodPending},
		{"crash looping", corev1.RestartPolicyAlways, nil, []containerView{backoff}, corev1.PodRunning},
		{"all done, Always", corev1.RestartPolicyAlways, nil, []containerView{done(0)}, corev1.PodRunning},
		{"completed", corev1.RestartPolicyNever, nil, []containerView{done(0)}, corev1.PodSucceeded},
		{"failed", corev1.RestartPolicyNever, nil, []containerView{done(0), done(2)}, corev1.PodFailed},
		{"OnFailure retrying", corev1.RestartPolicyOnFailure, nil, []containerView{done(2)}, corev1.PodRunning},
		{"OnFailure success", corev1.RestartPolicyOnFailure, nil, []containerView{done(0)}, corev1.PodSucceeded},
	}
	for _, tt := range tests {
		if got := podPhase(tt.policy, tt.init, tt.ctrs); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestBuildPodStatusKeepsTransitions(t *testing.T) {
	then := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: then},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: then},
		{Type: "example.com/gate", Status: corev1.ConditionTrue},
	}}}
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	ready := containerView{Name: "c", Ready: true, Started: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	st := buildPodStatus(podView{Pod: pod, Containers: []containerView{ready}, SandboxReady: true, PodIP: "10.0.1.1", HostIP: "10.0.0.1", Now: metav1.Now()})
	got := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range st.Conditions {
		got[c.Type] = c
	}
	if c := got[corev1.PodReady]; c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&then) {
		t.Errorf("Ready = %+v, want True since %v", c, then)
	}
	if _, ok := got[corev1.PodScheduled]; !ok {
		t.Error("PodScheduled, owned by the scheduler, was dropped")
	}
	if got[corev1.ContainersReady].Status != corev1.ConditionTrue || got[corev1.PodInitialized].Status != corev1.ConditionTrue {
		t.Errorf("conditions %+v", st.Conditions)
	}
	if st.Phase != corev1.PodRunning || st.PodIP != "10.0.1.1" || len(st.PodIPs) != 1 {
		t.Errorf("status %+v", st)
	}
}
