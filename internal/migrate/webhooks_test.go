package migrate

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The legacy chart's webhook Service, as release "etcd" names it.
const (
	testWebhookNS      = "etcd-operator-system"
	testWebhookService = "etcd-etcd-operator-webhook-service"
)

// legacyWebhook is a webhook as the legacy chart installs it (Service,
// CREATE and UPDATE of etcdclusters.etcd.aenix.io, failurePolicy Fail),
// changed by mods.
func legacyWebhook(mods ...func(*admissionregistrationv1.ValidatingWebhook)) admissionregistrationv1.ValidatingWebhook {
	h := admissionregistrationv1.ValidatingWebhook{
		Name: "vetcdcluster.kb.io",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: testWebhookNS, Name: testWebhookService, Path: ptr.To("/validate-etcd-aenix-io-v1alpha1-etcdcluster"),
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"etcd.aenix.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"etcdclusters"}},
		}},
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
	}
	for _, m := range mods {
		m(&h)
	}
	return h
}

// validating is a validating configuration of the given webhooks.
func validating(name string, hooks ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

// mutating is a mutating configuration of one webhook, made like h.
func mutating(name string, h admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.MutatingWebhook{{
		Name: "m" + strings.TrimPrefix(h.Name, "v"), ClientConfig: h.ClientConfig, Rules: h.Rules, FailurePolicy: h.FailurePolicy,
		NamespaceSelector: h.NamespaceSelector,
	}}}
}

// endpoints is an EndpointSlice of the webhook Service with one endpoint
// of the given readiness (nil: no condition).
func endpoints(ready *bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: testWebhookService + "-x1", Namespace: testWebhookNS,
			Labels: map[string]string{discoveryv1.LabelServiceName: testWebhookService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}},
	}
}

// findWebhooks runs the check for namespace "ns" on the given objects.
func findWebhooks(t *testing.T, objs ...client.Object) []WebhookFinding {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{corev1.LabelMetadataName: "ns", "team": "db"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, ns)...).Build()
	got, err := legacyWebhooks(context.Background(), c, []string{"ns"})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLegacyWebhooks(t *testing.T) {
	const (
		mutatingCmd   = "kubectl delete mutatingwebhookconfiguration etcd-etcd-operator-mutating-webhook-configuration"
		validatingCmd = "kubectl delete validatingwebhookconfiguration etcd-etcd-operator-validating-webhook-configuration"
	)
	chart := func(mods ...func(*admissionregistrationv1.ValidatingWebhook)) []client.Object {
		h := legacyWebhook(mods...)
		return []client.Object{
			mutating("etcd-etcd-operator-mutating-webhook-configuration", h),
			validating("etcd-etcd-operator-validating-webhook-configuration", h),
		}
	}
	for _, tc := range []struct {
		name     string
		objs     []client.Object
		commands []string
		reported int
	}{{
		name:     "the legacy chart's, its operator stopped",
		objs:     chart(),
		commands: []string{mutatingCmd, validatingCmd},
	}, {
		name:     "no failurePolicy: Fail is the default",
		objs:     chart(func(h *admissionregistrationv1.ValidatingWebhook) { h.FailurePolicy = nil }),
		commands: []string{mutatingCmd, validatingCmd},
	}, {
		name:     "only endpoints that are not ready",
		objs:     append(chart(), endpoints(ptr.To(false))),
		commands: []string{mutatingCmd, validatingCmd},
	}, {
		name: "every group, in the selected namespace",
		objs: chart(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].APIGroups = []string{"*"}
			h.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "db"}}
		}),
		commands: []string{mutatingCmd, validatingCmd},
	}, {
		name: "two webhooks of one configuration: one command",
		objs: []client.Object{validating("etcd-etcd-operator-validating-webhook-configuration",
			legacyWebhook(), legacyWebhook(func(h *admissionregistrationv1.ValidatingWebhook) { h.Name = "v2.kb.io" }))},
		commands: []string{validatingCmd},
	}, {
		name: "failurePolicy Ignore",
		objs: chart(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}),
	}, {
		name: "another group",
		objs: chart(func(h *admissionregistrationv1.ValidatingWebhook) { h.Rules[0].APIGroups = []string{"apps"} }),
	}, {
		name: "a Service with a ready endpoint",
		objs: append(chart(), endpoints(ptr.To(true))),
	}, {
		name: "an endpoint without conditions counts as ready",
		objs: append(chart(), endpoints(nil)),
	}, {
		name: "a namespace selector that leaves the run's namespace out",
		objs: chart(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "elsewhere"}}
		}),
	}, {
		name: "a URL: reported, not refused",
		objs: chart(func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://hooks.example.com/etcd")}
		}),
		reported: 2,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := findWebhooks(t, tc.objs...)
			reported := tc.reported
			if len(tc.commands) > 0 {
				reported = len(got)
			}
			if len(got) != reported {
				t.Errorf("%d findings, want %d: %+v", len(got), reported, got)
			}
			checkWebhookCommands(t, got, tc.commands)
		})
	}
}

// checkWebhookCommands checks that the dry run's report lists every
// finding, and that its notice and --apply's refusal give exactly the
// commands that delete the blocking configurations.
func checkWebhookCommands(t *testing.T, got []WebhookFinding, commands []string) {
	t.Helper()
	if cmds := deleteCommands(got); !slices.Equal(cmds, commands) {
		t.Errorf("delete commands %q, want %q\nfindings %+v", cmds, commands, got)
	}
	err := webhooksRefusal(got)
	if (err != nil) != (len(commands) > 0) {
		t.Errorf("refusal %v, want one: %t", err, len(commands) > 0)
	}
	var report bytes.Buffer
	renderWebhooks(&report, got)
	notice := webhooksNotice(got)
	if strings.Count(report.String(), "\n  ") != len(got) || (notice != "") != (len(commands) > 0) {
		t.Errorf("the dry run's report:\n%s%s", report.String(), notice)
	}
	for _, cmd := range commands {
		if err != nil && !strings.Contains(err.Error(), cmd) {
			t.Errorf("the refusal lacks %q: %v", cmd, err)
		}
		if !strings.Contains(notice, "\n  "+cmd+"\n") {
			t.Errorf("the dry run's notice lacks %q:\n%s", cmd, notice)
		}
	}
}

// TestApplyRefusesUnservedLegacyWebhooks: the stopped legacy operator's
// webhooks stop --apply before it changes anything, with the commands that
// remove them.
func TestApplyRefusesUnservedLegacyWebhooks(t *testing.T) {
	h := legacyWebhook()
	objs := append(stoppedOperators(), mutating("etcd-operator-mutating-webhook-configuration", h),
		validating("etcd-operator-validating-webhook-configuration", h))
	code, out, errOut, c := applyWith(t, Options{}, objs...)
	if code != ExitFailed {
		t.Errorf("exit %d, want %d\n%s%s", code, ExitFailed, out, errOut)
	}
	for _, want := range []string{
		"kubectl delete mutatingwebhookconfiguration etcd-operator-mutating-webhook-configuration",
		"kubectl delete validatingwebhookconfiguration etcd-operator-validating-webhook-configuration",
		"Nothing was changed",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the refusal does not say %q: %s", want, errOut)
		}
	}
	checkNothingChanged(t, c, out)
}
