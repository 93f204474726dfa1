package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/pki"
)

// TestAPIServerCallsWebhooks: the API server reaches an admission webhook
// through its Service's cluster IP, as on any cluster: a webhook served by
// a Pod refuses a write with its own message, and one whose Service has no
// endpoints fails the write with a refused connection (kube-proxy's
// reject), not with an unreachable network. Both have failurePolicy Fail
// and see only this test's labelled ConfigMaps.
func TestAPIServerCallsWebhooks(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	const denial = "refused by the sandbox test's webhook"
	caPEM := startDenyingWebhook(t, ns, "webhook", denial)
	if _, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "unserved"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "nobody"},
			Ports:    []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWebhookConfiguration(t, ns, caPEM, map[string]string{"served": "webhook", "unserved": "unserved"})

	// The API server picks up the configuration and kube-proxy the
	// Services within moments: wait for each outcome, not a fixed time.
	refusal := func(label string, want ...string) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("a %s ConfigMap to be refused with %q", label, want), func() (bool, string) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: label + "-", Labels: map[string]string{"webhook": label}}}
			_, err := k.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				return false, "created"
			}
			for _, w := range want {
				if strings.Contains(err.Error(), w) {
					return true, err.Error()
				}
			}
			return false, err.Error()
		})
	}
	refusal("served", `admission webhook "served.sandbox.test" denied the request: `+denial)
	refusal("unserved", `failed calling webhook "unserved.sandbox.test"`)
	refusal("unserved", "connection refused")
	// An object neither webhook selects goes through.
	if _, err := k.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a ConfigMap no webhook selects: %v", err)
	}
}

// startDenyingWebhook runs the helper's denying webhook as Pod and Service
// name in ns, with a serving certificate for the Service's name, and
// returns the CA that signed it.
func startDenyingWebhook(t *testing.T, ns, name, message string) []byte {
	t.Helper()
	ctx := context.Background()
	ca, err := pki.NewCA("webhook test CA")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(pki.Request{CommonName: name, DNSNames: []string{name + "." + ns + ".svc"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, helperPod(name, []string{"deny", "8443", message}, func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "TLS_CERT", Value: string(serving.CertPEM)},
			{Name: "TLS_KEY", Value: string(serving.KeyPEM)},
		}
	}))
	if _, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, name, 30*time.Second, "Running", running)
	return ca.CertPEM()
}

// createWebhookConfiguration makes a validating configuration with one
// webhook per entry of services (webhook name prefix to Service name),
// each seeing the creation of ConfigMaps in ns labelled webhook=<prefix>
// only, and deletes it when the test ends.
func createWebhookConfiguration(t *testing.T, ns string, caPEM []byte, services map[string]string) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	port := int32(443)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	for prefix, svc := range services {
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: prefix + ".sandbox.test",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Port: &port},
				CABundle: caPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"webhook": prefix}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	ctx := context.Background()
	client := k.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := client.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
}
