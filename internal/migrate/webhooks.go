package migrate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kinds of webhook configuration, as kubectl names them.
const (
	mutatingKind   = "mutatingwebhookconfiguration"
	validatingKind = "validatingwebhookconfiguration"
)

// webhook is what the check reads of one mutating or validating webhook.
type webhook struct {
	kind, configuration, name string
	rules                     []admissionregistrationv1.RuleWithOperations
	failurePolicy             *admissionregistrationv1.FailurePolicyType
	namespaceSelector         *metav1.LabelSelector
	clientConfig              admissionregistrationv1.WebhookClientConfig
}

// webhookWorld is what the check decides from, read once: the webhooks,
// the labels of the namespaces the run writes legacy objects in, and
// whether each Service a webhook calls has a ready endpoint.
type webhookWorld struct {
	webhooks   []webhook
	namespaces map[string]labels.Set
	served     map[string]bool // namespace/name of a Service
}

// WebhookFinding is a webhook that stands in the migration's way.
type WebhookFinding struct {
	Kind, Configuration, Webhook string
	// Blocking: it intercepts writes to etcd.aenix.io objects, fails
	// closed, and nothing serves it, so each such write fails. A webhook
	// called by URL is not blocking (the tool cannot tell whether it
	// answers) but is reported.
	Blocking bool
	Reason   string
}

// DeleteCommand is the command that removes the finding's configuration.
func (f WebhookFinding) DeleteCommand() string {
	return "kubectl delete " + f.Kind + " " + f.Configuration
}

// legacyWebhooks finds the admission webhooks that would fail the run's
// writes to etcd.aenix.io objects in the namespaces given. The legacy
// operator serves its own webhooks (failurePolicy Fail, for
// etcdclusters.etcd.aenix.io); once it is scaled to zero, as the migration
// asks, the API server refuses every create and update of a legacy cluster,
// including the garbage collector's removal of the orphan finalizer that
// ends the last step, which then hangs with the cluster half adopted.
func legacyWebhooks(ctx context.Context, c client.Client, namespaces []string) ([]WebhookFinding, error) {
	if len(namespaces) == 0 {
		return nil, nil
	}
	w, err := readWebhookWorld(ctx, c, namespaces)
	if err != nil {
		return nil, err
	}
	var out []WebhookFinding
	for _, wh := range w.webhooks {
		if f, ok := w.judge(wh); ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// judge decides whether one webhook stands in the way, and why.
func (w *webhookWorld) judge(wh webhook) (WebhookFinding, bool) {
	f := WebhookFinding{Kind: wh.kind, Configuration: wh.configuration, Webhook: wh.name}
	if !interceptsLegacy(wh.rules) || !failsClosed(wh.failurePolicy) || !w.selectsAnyNamespace(wh.namespaceSelector) {
		return f, false
	}
	svc := wh.clientConfig.Service
	if svc == nil {
		f.Reason = fmt.Sprintf("it calls %s with failurePolicy Fail: etcd-migrate cannot tell whether that answers; if it does not, writes to etcd.aenix.io objects fail", urlOf(wh.clientConfig))
		return f, true
	}
	if w.served[svc.Namespace+"/"+svc.Name] {
		return f, false
	}
	f.Blocking = true
	f.Reason = fmt.Sprintf("its Service %s/%s has no ready endpoint and its failurePolicy is Fail, so the API server refuses every write to etcd.aenix.io objects it intercepts", svc.Namespace, svc.Name)
	return f, true
}

// interceptsLegacy tells whether any rule covers the legacy API group.
func interceptsLegacy(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, LegacyGVR.Group) || slices.Contains(r.APIGroups, "*") {
			return true
		}
	}
	return false
}

// failsClosed tells whether a call that fails refuses the request: Fail is
// the API's default.
func failsClosed(p *admissionregistrationv1.FailurePolicyType) bool {
	return p == nil || *p == admissionregistrationv1.Fail
}

// selectsAnyNamespace tells whether the selector (none selects all) matches
// one of the run's namespaces. The object selector is not looked at: a
// webhook that might intercept counts as intercepting.
func (w *webhookWorld) selectsAnyNamespace(sel *metav1.LabelSelector) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if sel == nil || err != nil {
		return true
	}
	for _, l := range w.namespaces {
		if s.Matches(l) {
			return true
		}
	}
	return false
}

// urlOf is the URL a webhook without a Service calls.
func urlOf(cc admissionregistrationv1.WebhookClientConfig) string {
	if cc.URL == nil {
		return "no Service or URL"
	}
	return *cc.URL
}

// readWebhookWorld reads the webhook configurations, the namespaces and the
// EndpointSlices of the Services the webhooks call.
func readWebhookWorld(ctx context.Context, c client.Client, namespaces []string) (*webhookWorld, error) {
	w := &webhookWorld{namespaces: map[string]labels.Set{}, served: map[string]bool{}}
	var err error
	if w.webhooks, err = listWebhooks(ctx, c); err != nil {
		return nil, fmt.Errorf("listing admission webhook configurations, to find the legacy operator's, which fail the migration's writes while it is stopped: %w (the tool needs list on mutatingwebhookconfigurations and validatingwebhookconfigurations). Nothing was changed", err)
	}
	for _, name := range namespaces {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return nil, fmt.Errorf("reading namespace %s, to match the webhooks' namespace selectors: %w. Nothing was changed", name, err)
		}
		w.namespaces[name] = ns.Labels
	}
	for _, wh := range w.webhooks {
		svc := wh.clientConfig.Service
		if svc == nil || !interceptsLegacy(wh.rules) {
			continue
		}
		ready, err := serviceServed(ctx, c, svc.Namespace, svc.Name)
		if err != nil {
			return nil, fmt.Errorf("reading the endpoints of webhook %s's Service %s/%s: %w. Nothing was changed", wh.name, svc.Namespace, svc.Name, err)
		}
		w.served[svc.Namespace+"/"+svc.Name] = ready
	}
	return w, nil
}

// listWebhooks lists the mutating and validating webhooks.
func listWebhooks(ctx context.Context, c client.Client) ([]webhook, error) {
	var out []webhook
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mutating); err != nil {
		return nil, err
	}
	for _, cfg := range mutating.Items {
		for _, h := range cfg.Webhooks {
			out = append(out, webhook{mutatingKind, cfg.Name, h.Name, h.Rules, h.FailurePolicy, h.NamespaceSelector, h.ClientConfig})
		}
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, validating); err != nil {
		return nil, err
	}
	for _, cfg := range validating.Items {
		for _, h := range cfg.Webhooks {
			out = append(out, webhook{validatingKind, cfg.Name, h.Name, h.Rules, h.FailurePolicy, h.NamespaceSelector, h.ClientConfig})
		}
	}
	return out, nil
}

// serviceServed tells whether a Service has a ready endpoint in its
// EndpointSlices (an endpoint without a ready condition counts as ready).
func serviceServed(ctx context.Context, c client.Client, ns, name string) (bool, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return false, err
	}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				return true, nil
			}
		}
	}
	return false, nil
}

// renderWebhooks lists the findings.
func renderWebhooks(out io.Writer, findings []WebhookFinding) {
	if len(findings) == 0 {
		return
	}
	fmt.Fprintln(out, "Admission webhooks on etcd.aenix.io objects:")
	for _, f := range findings {
		fmt.Fprintf(out, "  %s %s, webhook %s: %s\n", f.Kind, f.Configuration, f.Webhook, f.Reason)
	}
}

// webhooksNotice is what a dry run says of the blocking findings: that
// --apply refuses, and the commands that remove them ("" when none block).
func webhooksNotice(findings []WebhookFinding) string {
	cmds := deleteCommands(findings)
	if len(cmds) == 0 {
		return ""
	}
	return fmt.Sprintf("WEBHOOKS: --apply refuses to start while these fail the writes it makes; delete them (the legacy operator, stopped, no longer serves them):\n  %s\n",
		strings.Join(cmds, "\n  "))
}

// deleteCommands are the commands that remove the configurations of the
// blocking findings, one per configuration.
func deleteCommands(findings []WebhookFinding) []string {
	var out []string
	for _, f := range findings {
		if cmd := f.DeleteCommand(); f.Blocking && !slices.Contains(out, cmd) {
			out = append(out, cmd)
		}
	}
	return out
}

// webhooksRefusal is the error that stops --apply while a blocking webhook
// stands, or nil.
func webhooksRefusal(findings []WebhookFinding) error {
	cmds := deleteCommands(findings)
	if len(cmds) == 0 {
		return nil
	}
	return fmt.Errorf("the legacy operator's admission webhooks (listed above) have no ready endpoint and fail closed: the API server would refuse the writes to etcd.aenix.io objects the migration makes, stopping it midway. Delete their configurations, which the stopped legacy operator no longer serves:\n  %s\nor scale the legacy operator back up and migrate later. Nothing was changed",
		strings.Join(cmds, "\n  "))
}
