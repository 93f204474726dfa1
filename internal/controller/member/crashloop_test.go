package member

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// etcdPod is a Pod whose etcd container has restarted restarts times and
// is as the modifiers make it: by default waiting to start again after
// failing with exit code 2.
func etcdPod(restarts int32, mods ...func(*corev1.Pod, *corev1.ContainerStatus)) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-a", Namespace: "ns"}}
	cs := corev1.ContainerStatus{Name: manifest.EtcdContainer, RestartCount: restarts,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 2, Reason: "Error", Message: "panic: failed to recover v3 backend from snapshot\n\ngoroutine 1 [running]:\nmain.main()\n\t/go/src/main.go:1 +0x1"}}}
	for _, mod := range mods {
		mod(pod, &cs)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return pod
}

func readyAt(n string) func(*corev1.Pod, *corev1.ContainerStatus) {
	return func(p *corev1.Pod, _ *corev1.ContainerStatus) {
		p.Annotations = map[string]string{annotationReadyRestarts: n}
	}
}

func exited(code int32, reason string) func(*corev1.Pod, *corev1.ContainerStatus) {
	return func(_ *corev1.Pod, cs *corev1.ContainerStatus) {
		cs.LastTerminationState.Terminated.ExitCode, cs.LastTerminationState.Terminated.Reason = code, reason
	}
}

func running(ready bool) func(*corev1.Pod, *corev1.ContainerStatus) {
	return func(_ *corev1.Pod, cs *corev1.ContainerStatus) {
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		cs.Ready = ready
	}
}

// A member is crash-looping after crashLoopRestarts failed starts in a row
// since etcd was last seen ready, when etcd failed by itself; never for
// restarts between which it came up, for ends by a signal, an OOM kill or
// a clean stop, nor while it runs or its Pod is being deleted.
func TestCrashLoopMessage(t *testing.T) {
	deleting := func(p *corev1.Pod, _ *corev1.ContainerStatus) { p.DeletionTimestamp = &metav1.Time{} }
	terminatedNow := func(_ *corev1.Pod, cs *corev1.ContainerStatus) {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "guard-data: refusing to start etcd: something new"}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"fewer failed starts than the limit", etcdPod(crashLoopRestarts - 1), false},
		{"as many failed starts as the limit", etcdPod(crashLoopRestarts), true},
		{"many restarts, but etcd came up since all but a few", etcdPod(crashLoopRestarts+3, readyAt("4")), false},
		{"the limit reached since etcd last came up", etcdPod(crashLoopRestarts+4, readyAt("4")), true},
		{"a garbled record counts from the Pod's first start", etcdPod(crashLoopRestarts, readyAt("x")), true},
		{"running now, unready (no quorum, say)", etcdPod(crashLoopRestarts+10, running(false)), false},
		{"ended by a signal (the liveness probe, a drain)", etcdPod(crashLoopRestarts, exited(137, "Error")), false},
		{"ended by SIGTERM", etcdPod(crashLoopRestarts, exited(143, "Error")), false},
		{"a node's reboot", etcdPod(crashLoopRestarts, exited(255, "Unknown")), false},
		{"killed for memory", etcdPod(crashLoopRestarts, exited(1, "OOMKilled")), false},
		{"stopped cleanly (removed from the cluster)", etcdPod(crashLoopRestarts, exited(0, "Completed")), false},
		{"its Pod is being deleted", etcdPod(crashLoopRestarts, deleting), false},
		{"ended now, before the kubelet's back-off", etcdPod(crashLoopRestarts, terminatedNow), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := crashLoopMessage(c.pod)
			if (msg != "") != c.want {
				t.Fatalf("crashLoopMessage = %q; crash-looping %t, want %t", msg, msg != "", c.want)
			}
		})
	}
	msg := crashLoopMessage(etcdPod(crashLoopRestarts + 1))
	for _, want := range []string{"6 times in a row", "code 2", "panic: failed to recover v3 backend from snapshot"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message %q does not say %q", msg, want)
		}
	}
}

// The restart count etcd came up at is recorded once a restarted container
// is ready, and only then: a steady member's Pod is never written for it.
func TestReadyRestartsToRecord(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a first start, ready", etcdPod(0, running(true)), ""},
		{"ready after restarts", etcdPod(3, running(true)), "3"},
		{"ready, recorded", etcdPod(3, running(true), readyAt("3")), "3"},
		{"ready after more restarts", etcdPod(7, running(true), readyAt("3")), "7"},
		{"running, not ready", etcdPod(7, running(false), readyAt("3")), "3"},
		{"failing", etcdPod(7, readyAt("3")), "3"},
		{"failing, nothing recorded", etcdPod(7), ""},
	} {
		if got := readyRestartsToRecord(c.pod); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The line quoted is the one that says why etcd stopped, not the last line
// of a stack trace.
func TestLastWords(t *testing.T) {
	for _, c := range []struct {
		name string
		t    corev1.ContainerStateTerminated
		want string
	}{
		{"etcd's panic entry", corev1.ContainerStateTerminated{Message: `{"level":"info","msg":"starting"}
{"level":"panic","msg":"failed to recover v3 backend from snapshot"}
panic: failed to recover v3 backend from snapshot

goroutine 1 [running]:
	/go/src/x.go:1 +0x1`}, `{"level":"panic","msg":"failed to recover v3 backend from snapshot"}`},
		{"Go's fatal error", corev1.ContainerStateTerminated{Message: "unexpected fault address 0x7f\nfatal error: fault\n[signal SIGBUS: bus error]\n\ngoroutine 7:\n\t/go/x.go:1"}, "fatal error: fault"},
		{"the guard's refusal", corev1.ContainerStateTerminated{Message: "guard-data: refusing to start etcd: x\n"}, "guard-data: refusing to start etcd: x"},
		{"no message", corev1.ContainerStateTerminated{Reason: "Error"}, "Error (no message)"},
		{"a long line", corev1.ContainerStateTerminated{Message: strings.Repeat("é", 400)}, strings.Repeat("é", lastWordsMax/2) + "…"},
	} {
		if got := lastWords(&c.t); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
