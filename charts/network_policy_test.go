package charts

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// networkPolicies renders the chart as release eo in namespace ops and
// returns its NetworkPolicies by namespace.
func networkPolicies(t *testing.T, values map[string]any) map[string]*networkingv1.NetworkPolicy {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*networkingv1.NetworkPolicy{}
	for _, obj := range objs {
		if obj.GetKind() != "NetworkPolicy" {
			continue
		}
		np := &networkingv1.NetworkPolicy{}
		fromUnstructured(t, obj, np)
		out[np.Namespace] = np
	}
	return out
}

func networkPolicyOn(extra map[string]any) map[string]any {
	np := map[string]any{"enabled": true}
	for k, v := range extra {
		np[k] = v
	}
	return map[string]any{"networkPolicy": np, "manager": map[string]any{"watchNamespaces": []any{"db", "db2"}}}
}

func TestNetworkPolicyIsOffByDefault(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults":          nil,
		"watching two only": {"manager": map[string]any{"watchNamespaces": []any{"db", "db2"}}},
	} {
		if got := networkPolicies(t, values); len(got) != 0 {
			t.Errorf("%s: rendered NetworkPolicies in %v, want none (a policy isolates the members it selects)", name, keys(got))
		}
	}
}

func TestNetworkPolicyNeedsNamespaces(t *testing.T) {
	_, err := tools.RenderChart("eo", "ops", map[string]any{"networkPolicy": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.enabled needs the namespaces") {
		t.Errorf("watching every namespace with networkPolicy.enabled: got %v, want a refusal that asks for the namespaces", err)
	}
}

func TestNetworkPolicyGoesWhereTheMembersLive(t *testing.T) {
	if got := keys(networkPolicies(t, networkPolicyOn(nil))); got != "db,db2" {
		t.Errorf("watching db and db2, policies in %s", got)
	}
	explicit := networkPolicyOn(map[string]any{"namespaces": []any{"tenant"}})
	if got := keys(networkPolicies(t, explicit)); got != "tenant" {
		t.Errorf("with networkPolicy.namespaces [tenant], policies in %s", got)
	}
	explicit["manager"] = map[string]any{}
	if got := keys(networkPolicies(t, explicit)); got != "tenant" {
		t.Errorf("watching every namespace with networkPolicy.namespaces [tenant], policies in %s", got)
	}
}

// source is a Pod that opens a connection.
type source struct {
	namespace string
	labels    map[string]string
}

var (
	member          = source{"db", manifest.MemberLabels("main", "main-x7k2p")}
	voter           = source{"db", withVoter(manifest.MemberLabels("main", "main-q9w4z"))}
	otherCluster    = source{"db", manifest.MemberLabels("other", "other-b5m1c")}
	memberElsewhere = source{"db3", manifest.MemberLabels("main", "main-j8d3f")}
	application     = source{"db", map[string]string{"app": "api"}}
	snapshotJob     = source{"db", snapshotPodLabels()}
	operatorPod     = source{"ops", map[string]string{"app.kubernetes.io/name": "etcd-operator", "app.kubernetes.io/instance": "eo", "control-plane": "controller-manager", "pod-template-hash": "5d8f"}}
	otherOpsPod     = source{"ops", map[string]string{"app": "debug"}}
	promServer      = source{"monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}}
	outsider        = source{"web", map[string]string{"app": "api"}}
)

func withVoter(l map[string]string) map[string]string {
	l[manifest.LabelRole] = manifest.RoleVoter
	return l
}

// snapshotPodLabels are the labels of a snapshot Job's Pod, as the
// operator renders it.
func snapshotPodLabels() map[string]string {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: "db"}}
	s := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "db"}}
	return manifest.SnapshotJob(s, c, nil, "operator:dev").Spec.Template.Labels
}

// TestNetworkPolicyAdmitsOnlyWhatNeedsEachPort evaluates the rendered
// policy in db as a CNI would, for connections from each source to a
// member's three ports.
func TestNetworkPolicyAdmitsOnlyWhatNeedsEachPort(t *testing.T) {
	prom := map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}
	web := map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "web"}}, "podSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}}
	np := networkPolicies(t, networkPolicyOn(map[string]any{
		"metrics": map[string]any{"extraFrom": []any{prom}},
		"client":  map[string]any{"extraFrom": []any{web}},
	}))["db"]
	if np == nil {
		t.Fatal("no NetworkPolicy in db")
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policy types %v, want Ingress only (egress is not restricted)", np.Spec.PolicyTypes)
	}
	for _, selected := range []source{member, voter, otherCluster} {
		if !selects(t, np, selected) {
			t.Errorf("the policy does not select the member Pod %v", selected.labels)
		}
	}
	if selects(t, np, snapshotJob) || selects(t, np, application) {
		t.Error("the policy selects a snapshot Job's Pod or an application's: only members serve etcd's ports")
	}
	const peer, client, metrics = manifest.PeerPort, manifest.ClientPort, manifest.MetricsPort
	cases := []struct {
		name string
		from source
		port int32
		want bool
	}{
		{"a member to a peer", member, peer, true},
		{"a voter to a peer", voter, peer, true},
		// Not expressible per cluster in a static policy; peer TLS separates clusters.
		{"another cluster's member of the namespace to a peer", otherCluster, peer, true},
		{"a member of another namespace to a peer", memberElsewhere, peer, false},
		{"an application to a peer", application, peer, false},
		{"a snapshot Job to a peer", snapshotJob, peer, false},
		{"the operator to a peer", operatorPod, peer, false},
		{"an application of the namespace to a client", application, client, true},
		{"a snapshot Job to a client", snapshotJob, client, true},
		{"the operator to a client", operatorPod, client, true},
		{"another Pod of the operator's namespace to a client", otherOpsPod, client, false},
		{"an extra client source", outsider, client, true},
		{"Prometheus to a client", promServer, client, false},
		{"the operator to the metrics and health port", operatorPod, metrics, true},
		{"Prometheus (extra) to the metrics port", promServer, metrics, true},
		{"an application of the namespace to the metrics port", application, metrics, false},
		{"another Pod of the operator's namespace to the metrics port", otherOpsPod, metrics, false},
		{"a member to the metrics port", member, metrics, false},
		{"the operator to a port no member serves", operatorPod, 8080, false},
	}
	for _, c := range cases {
		if got := admits(t, np, c.from, c.port); got != c.want {
			t.Errorf("%s (%d): admitted %v, want %v", c.name, c.port, got, c.want)
		}
	}
}

func TestNetworkPolicyExtraPeers(t *testing.T) {
	nodes := map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}
	np := networkPolicies(t, networkPolicyOn(map[string]any{"peer": map[string]any{"extraFrom": []any{nodes}}}))["db"]
	rule := np.Spec.Ingress[0]
	if rule.Ports[0].Port.IntVal != manifest.PeerPort || len(rule.From) != 2 || rule.From[1].IPBlock == nil || rule.From[1].IPBlock.CIDR != "10.0.0.0/24" {
		t.Errorf("the peer rule with an extra ipBlock is %+v", rule)
	}
	_, err := tools.RenderChart("eo", "ops", networkPolicyOn(map[string]any{"client": map[string]any{"extraFrom": []any{map[string]any{"podSelectr": map[string]any{}}}}}))
	if err == nil || !strings.Contains(err.Error(), "podSelectr") {
		t.Errorf("a misspelt peer: got %v, want the schema's refusal naming it", err)
	}
}

func selects(t *testing.T, np *networkingv1.NetworkPolicy, s source) bool {
	t.Helper()
	return s.namespace == np.Namespace && matches(t, np.Spec.PodSelector, s.labels)
}

// admits reports whether np lets s connect to a selected Pod's TCP port:
// a rule admits when one of its ports is port and one of its peers is s
// (a peer's podSelector alone means the policy's own namespace).
func admits(t *testing.T, np *networkingv1.NetworkPolicy, s source, port int32) bool {
	t.Helper()
	nsLabels := map[string]string{corev1.LabelMetadataName: s.namespace}
	for _, rule := range np.Spec.Ingress {
		if !hasPort(rule.Ports, port) {
			continue
		}
		for _, p := range rule.From {
			nsOK := s.namespace == np.Namespace
			if p.NamespaceSelector != nil {
				nsOK = matches(t, *p.NamespaceSelector, nsLabels)
			}
			podOK := p.PodSelector == nil || matches(t, *p.PodSelector, s.labels)
			if p.IPBlock == nil && nsOK && podOK {
				return true
			}
		}
	}
	return false
}

func hasPort(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	for _, p := range ports {
		if p.Port != nil && p.Port.IntVal == port && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
			return true
		}
	}
	return false
}

func matches(t *testing.T, sel metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(labels.Set(l))
}

func keys[V any](m map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}
