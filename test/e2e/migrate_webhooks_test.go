package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/migrate"
)

// The legacy chart's webhooks, as it names them: kubebuilder's names, and
// configurations and Service after the release's <fullname>, here the
// suite's namespace (webhook configurations are cluster-wide).
const (
	legacyMutatingWebhook   = "metcdcluster.kb.io"
	legacyValidatingWebhook = "vetcdcluster.kb.io"
)

// legacyWebhooksRefused plays what the stopped legacy operator leaves: its
// mutating and validating webhook configurations for etcd.aenix.io, failing
// closed, calling a Service the scaled-down operator no longer serves, and
// seeing this namespace alone. The API server then refuses every write to a
// legacy cluster: the dry run reports the webhooks, --apply refuses with the
// commands that delete them and changes nothing, and once those commands
// ran, writes go through again.
func legacyWebhooksRefused(t *testing.T, ns, name string) {
	t.Helper()
	installLegacyWebhooks(t, ns)
	eventually(t, time.Minute, "a write to the legacy EtcdCluster refused by its webhook", func() (bool, string) {
		err := probeLegacyWrite(ns, name)
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), fmt.Sprint(err)
	})
	t.Logf("a write to the legacy cluster with its webhooks unserved: %v", probeLegacyWrite(ns, name))
	fullname := ns + "-etcd-operator"
	commands := []string{
		"kubectl delete mutatingwebhookconfiguration " + fullname + "-mutating-webhook-configuration",
		"kubectl delete validatingwebhookconfiguration " + fullname + "-validating-webhook-configuration",
	}
	before := legacyVersions(t, ns, name)
	out, code := runMigrateLive(t, ns)
	if code != migrate.ExitFailed || !strings.Contains(out, "WEBHOOKS:") {
		t.Errorf("dry run with the legacy webhooks unserved: exit %d, want them reported\n%s", code, out)
	}
	out, code = runMigrateLive(t, ns, "--apply", "--yes", "--skip-backup")
	if code != migrate.ExitFailed || !strings.Contains(out, "Nothing was changed") {
		t.Errorf("apply with the legacy webhooks unserved: exit %d, want a refusal\n%s", code, out)
	}
	t.Logf("etcd-migrate --apply with the legacy webhooks unserved:\n%s", out)
	for _, cmd := range commands {
		if !strings.Contains(out, cmd) {
			t.Errorf("the refusal lacks %q:\n%s", cmd, out)
		}
	}
	if after := legacyVersions(t, ns, name); !maps.Equal(before, after) {
		t.Errorf("the refused apply changed objects:\nbefore %v\nafter  %v", before, after)
	}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &v1alpha2.EtcdCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused apply created an EtcdCluster (err %v)", err)
	}
	// Do as the refusal says.
	for _, cmd := range commands {
		if out, err := kubectl(strings.Fields(cmd)[1:]...); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	eventually(t, time.Minute, "a write to the legacy EtcdCluster accepted", func() (bool, string) {
		err := probeLegacyWrite(ns, name)
		return err == nil, fmt.Sprint(err)
	})
}

// probeLegacyWrite asks the API server to update the legacy EtcdCluster
// without storing it (server-side dry run, which admission webhooks see as
// any update).
func probeLegacyWrite(ns, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(migrate.LegacyGVR.GroupVersion().WithKind("EtcdCluster"))
	u.SetNamespace(ns)
	u.SetName(name)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e.test/probe":"write"}}}`))
	return k.Patch(context.Background(), u, patch, client.DryRunAll)
}

// installLegacyWebhooks makes the legacy chart's webhook Service (selecting
// the stand-in legacy operator's Pods, of which there are none) and its two
// configurations, and deletes what is left of them when the test ends.
func installLegacyWebhooks(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	fullname := ns + "-etcd-operator"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fullname + "-webhook-service", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"control-plane": "legacy-manager"},
			Ports:    []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(9443), Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := k.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: fullname + "-mutating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: legacyMutatingWebhook, ClientConfig: legacyWebhookClient(svc, "/mutate-etcd-aenix-io-v1alpha1-etcdcluster"),
			Rules: legacyWebhookRules(), FailurePolicy: ptr.To(admissionregistrationv1.Fail), NamespaceSelector: onlyNamespace(ns),
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: fullname + "-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: legacyValidatingWebhook, ClientConfig: legacyWebhookClient(svc, "/validate-etcd-aenix-io-v1alpha1-etcdcluster"),
			Rules: legacyWebhookRules(), FailurePolicy: ptr.To(admissionregistrationv1.Fail), NamespaceSelector: onlyNamespace(ns),
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
	for _, obj := range []client.Object{mutating, validating} {
		if err := k.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.IgnoreNotFound(k.Delete(context.Background(), obj)) })
	}
}

func legacyWebhookClient(svc *corev1.Service, path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: svc.Namespace, Name: svc.Name, Path: ptr.To(path), Port: ptr.To[int32](443),
	}}
}

// legacyWebhookRules are the legacy webhooks' rules: creating and updating
// etcdclusters.etcd.aenix.io.
func legacyWebhookRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{migrate.LegacyGVR.Group}, APIVersions: []string{migrate.LegacyGVR.Version}, Resources: []string{migrate.LegacyGVR.Resource},
		},
	}}
}

// onlyNamespace keeps a webhook to one namespace, so that the suites beside
// this one are not affected.
func onlyNamespace(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
}
