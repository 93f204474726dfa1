package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestServiceNames: a Service's name resolves in Pods to its ready
// endpoints only, following readiness; Pods behind a headless Service get
// their hostname.subdomain names whether ready or not.
func TestServiceNames(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"tier": "web"}, Ports: []corev1.ServicePort{{Port: 8080}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "peers"}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"tier": "web"}, Ports: []corev1.ServicePort{{Port: 8080}},
		}},
	} {
		if _, err := k.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	withReadiness := func(p *corev1.Pod) {
		p.Labels["tier"] = "web"
		p.Spec.Hostname, p.Spec.Subdomain = p.Name, "peers"
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
	}
	createPod(t, ns, helperPod("a", []string{"serve", "8080"}, withReadiness))
	createPod(t, ns, helperPod("b", []string{"serve", "8080"}, withReadiness))
	a := waitPod(t, ns, "a", 30*time.Second, "Ready", ready)
	b := waitPod(t, ns, "b", 30*time.Second, "Ready", ready)

	resolve := func(name string) string {
		out, _ := execIn(t, ns, "a", "/bin/helper", "resolve", name)
		return strings.TrimSpace(out)
	}
	waitFor(t, 15*time.Second, "web to resolve to both Pods", func() (bool, string) {
		got := resolve("web." + ns + ".svc.cluster.local")
		return strings.Contains(got, a.Status.PodIP) && strings.Contains(got, b.Status.PodIP), got
	})
	if _, err := execIn(t, ns, "b", "/bin/helper", "write", "/tmp/unready", "x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "web to drop the unready Pod", func() (bool, string) {
		got := resolve("web")
		return got == a.Status.PodIP, got
	})
	waitFor(t, 10*time.Second, "the unready Pod's own name to stay", func() (bool, string) {
		got := resolve("b.peers")
		return got == b.Status.PodIP, got
	})
}
