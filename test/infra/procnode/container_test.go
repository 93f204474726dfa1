//go:build linux

package procnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestBindToPodIP(t *testing.T) {
	for in, want := range map[string]string{
		"--listen-peer-urls=http://0.0.0.0:2380":  "--listen-peer-urls=http://10.244.0.9:2380",
		"--listen-client-urls=https://[::]:2379":  "--listen-client-urls=https://10.244.0.9:2379",
		"--health-probe-bind-address=:8081":       "--health-probe-bind-address=10.244.0.9:8081",
		":8080":                                   "10.244.0.9:8080",
		"--advertise-client-urls=http://a.b:2379": "--advertise-client-urls=http://a.b:2379",
		"--metrics-bind-address=0":                "--metrics-bind-address=0",
	} {
		if got := bindToPodIP(in, "10.244.0.9"); got != want {
			t.Errorf("bindToPodIP(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "x": "x"} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCredentialsRefuseRootWhenNonRootIsRequired(t *testing.T) {
	nonRoot := true
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot}}}
	if _, _, _, err := credentials(pod, corev1.Container{}, Image{}); err == nil {
		t.Error("a root image ran with runAsNonRoot")
	}
	uid, gid, _, err := credentials(pod, corev1.Container{}, Image{User: 65532, Group: 65532})
	if err != nil || uid != 65532 || gid != 65532 {
		t.Errorf("image user: uid %d gid %d err %v", uid, gid, err)
	}
	fsGroup, user := int64(2000), int64(1000)
	pod.Spec.SecurityContext.FSGroup = &fsGroup
	c := corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsUser: &user}}
	uid, _, groups, err := credentials(pod, c, Image{})
	if err != nil || uid != 1000 || len(groups) != 1 || groups[0] != 2000 {
		t.Errorf("container user and fsGroup: uid %d groups %v err %v", uid, groups, err)
	}
}

func TestCommandLineComposesAsKubernetes(t *testing.T) {
	img := Image{Entrypoint: []string{"/usr/local/bin/etcd"}}
	env := []string{"NAME=m-1"}
	for _, tc := range []struct {
		c    corev1.Container
		want string
	}{
		{corev1.Container{}, "/usr/local/bin/etcd"},
		{corev1.Container{Args: []string{"--name=$(NAME)"}}, "/usr/local/bin/etcd --name=m-1"},
		{corev1.Container{Command: []string{"etcd"}, Args: []string{"--x"}}, "etcd --x"},
	} {
		if got := strings.Join(commandLine(tc.c, img, env), " "); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
