package sandbox_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestKillRestartsContainer: `fault kill` SIGKILLs the container; the node
// restarts it at once with restartCount 1 and lastState.terminated set.
func TestKillRestartsContainer(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("victim", []string{"sleep"}))
	before := waitPod(t, ns, "victim", 30*time.Second, "Running", running)
	if err := sb.Kill(t.Context(), ns, "victim", ""); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, ns, "victim", 30*time.Second, "restarted once", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil && cs.LastTerminationState.Terminated != nil
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last.ExitCode != 137 || last.Reason != "Error" {
		t.Errorf("lastState.terminated = exit %d reason %q, want 137 Error", last.ExitCode, last.Reason)
	}
	if last.StartedAt.IsZero() || last.FinishedAt.Before(&last.StartedAt) {
		t.Errorf("lastState times: started %v finished %v", last.StartedAt, last.FinishedAt)
	}
	if p.Status.PodIP != before.Status.PodIP {
		t.Errorf("the Pod IP changed across a container restart: %s -> %s", before.Status.PodIP, p.Status.PodIP)
	}
}
