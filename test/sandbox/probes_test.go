package sandbox_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestProbesDriveReadiness: an httpGet readiness probe follows the
// container's answer both ways; a tcpSocket startup probe gates it; an
// exec liveness probe that fails restarts the container.
func TestProbesDriveReadiness(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("web", []string{"serve", "8080"}, func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		c.StartupProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, FailureThreshold: 30,
		}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/helper", "cat", "/tmp/alive"}}},
			PeriodSeconds: 1, FailureThreshold: 2, InitialDelaySeconds: 30,
		}
	}))
	waitPod(t, ns, "web", 30*time.Second, "Ready", func(p *corev1.Pod) bool {
		return ready(p) && *p.Status.ContainerStatuses[0].Started
	})
	if _, err := execIn(t, ns, "web", "/bin/helper", "write", "/tmp/unready", "x"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "web", 15*time.Second, "not Ready", func(p *corev1.Pod) bool { return !ready(p) && running(p) })
	if _, err := execIn(t, ns, "web", "/bin/helper", "rm", "/tmp/unready"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "web", 15*time.Second, "Ready again", ready)
}

// TestLivenessProbeRestarts: a failing exec liveness probe kills the
// container, which the node restarts.
func TestLivenessProbeRestarts(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("sick", []string{"sleep"}, func(p *corev1.Pod) {
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/helper", "cat", "/tmp/missing"}}},
			PeriodSeconds: 1, FailureThreshold: 2,
		}
	}))
	p := waitPod(t, ns, "sick", 30*time.Second, "restarted by its liveness probe", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	// helper sleep exits 0 on SIGTERM: the kill was graceful.
	if last == nil || last.ExitCode != 0 {
		t.Errorf("lastState = %+v, want a graceful exit 0", last)
	}
}
