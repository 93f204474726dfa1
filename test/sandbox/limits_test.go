package sandbox_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestMemoryLimitEnforced: a container that uses more memory than its limit
// is killed by the kernel in its cgroup and reported OOMKilled, while one
// that stays under its limit keeps running.
func TestMemoryLimitEnforced(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	limited := func(mb string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mb)},
			}
		}
	}
	createPod(t, ns, helperPod("hog", []string{"alloc", "96"}, limited("48Mi")))
	createPod(t, ns, helperPod("modest", []string{"alloc", "8"}, limited("48Mi")))
	p := waitPod(t, ns, "hog", 60*time.Second, "OOMKilled", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Terminated != nil
	})
	if term := p.Status.ContainerStatuses[0].State.Terminated; term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("the container over its limit ended %s/%d, want OOMKilled/137", term.Reason, term.ExitCode)
	}
	waitFor(t, 30*time.Second, "the modest container to have allocated its memory", func() (bool, string) {
		out, _ := kubectl(t, "logs", "-n", ns, "modest")
		return strings.HasPrefix(out, "allocated 8 MiB\n"), out
	})
	if p := waitPod(t, ns, "modest", 10*time.Second, "Running", running); p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("the container under its limit is not running: %s", podSummary(p))
	}
}
