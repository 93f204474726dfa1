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

// TestDNSAndServices: CoreDNS answers a Service's name with its cluster IP,
// and kube-proxy routes that IP to the ready endpoints only, following
// readiness; a headless Service that publishes not-ready addresses gives
// each Pod its hostname.subdomain name whether ready or not; the API
// server's Service resolves too.
func TestDNSAndServices(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	web, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"tier": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "peers"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"tier": "web"}, Ports: []corev1.ServicePort{{Port: 8080}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
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
	createPod(t, ns, helperPod("client", []string{"sleep"}))
	waitPod(t, ns, "a", 30*time.Second, "Ready", ready)
	b := waitPod(t, ns, "b", 30*time.Second, "Ready", ready)
	waitPod(t, ns, "client", 30*time.Second, "Running", running)

	in := func(args ...string) string {
		out, _ := execIn(t, ns, "client", append([]string{"/bin/helper"}, args...)...)
		return strings.TrimSpace(out)
	}
	for _, name := range []string{"web", "web." + ns, "web." + ns + ".svc.cluster.local"} {
		if got := in("resolve", name); got != web.Spec.ClusterIP {
			t.Errorf("%s resolves to %q, want the cluster IP %s", name, got, web.Spec.ClusterIP)
		}
	}
	inst := sb.Instance()
	if got, want := in("resolve", "kubernetes.default.svc"), inst.KubernetesServiceIP().String(); got != want {
		t.Errorf("kubernetes.default.svc resolves to %q, want %s", got, want)
	}
	// kube-proxy picks an endpoint at random: ask until both have answered.
	seen := map[string]bool{}
	waitFor(t, 30*time.Second, "the Service to route to both Pods", func() (bool, string) {
		seen[in("get", "http://web/")] = true
		return seen["hello from a"] && seen["hello from b"], strings.Join(keys(seen), " | ")
	})

	if _, err := execIn(t, ns, "b", "/bin/helper", "write", "/tmp/unready", "x"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "b", 20*time.Second, "not Ready", func(p *corev1.Pod) bool { return !ready(p) })
	waitFor(t, 20*time.Second, "the Service to answer from the ready Pod only, ten times in a row", func() (bool, string) {
		for range 10 {
			if got := in("get", "http://web/"); got != "hello from a" {
				return false, got
			}
		}
		return true, ""
	})
	if got := in("resolve", "b.peers"); got != b.Status.PodIP {
		t.Errorf("the unready Pod's own name b.peers resolves to %q, want %s", got, b.Status.PodIP)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
