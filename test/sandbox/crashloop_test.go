package sandbox_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestCrashLoopBackOff: a container that keeps failing is restarted at
// once the first time, then only after a back-off of about 10 s, waiting
// in CrashLoopBackOff meanwhile.
func TestCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("crasher", []string{"exit", "3", "boom"}))
	p := waitPod(t, ns, "crasher", 30*time.Second, "in CrashLoopBackOff after its first restart", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 3 || last.Reason != "Error" {
		t.Fatalf("lastState = %+v, want exit 3 reason Error", last)
	}
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running (restartPolicy Always)", p.Status.Phase)
	}
	p = waitPod(t, ns, "crasher", 30*time.Second, "restarted a second time", func(p *corev1.Pod) bool {
		return p.Status.ContainerStatuses[0].RestartCount == 2
	})
	cs := p.Status.ContainerStatuses[0]
	var started time.Time
	switch {
	case cs.State.Running != nil:
		started = cs.State.Running.StartedAt.Time
	case cs.State.Terminated != nil:
		started = cs.State.Terminated.StartedAt.Time
	case cs.LastTerminationState.Terminated != nil:
		started = cs.LastTerminationState.Terminated.StartedAt.Time
	}
	if gap := started.Sub(last.FinishedAt.Time); gap < 9*time.Second {
		t.Errorf("second restart %s after the failure, want a back-off of about 10s", gap)
	}
}
