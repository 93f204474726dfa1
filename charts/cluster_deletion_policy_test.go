package charts

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// namespaceController is the only user the cluster guard always lets
// delete an EtcdCluster: a namespace being deleted must not hang.
const namespaceController = "system:serviceaccount:kube-system:namespace-controller"

// TestClusterDeletionGuardByDefault: deleting an EtcdCluster deletes its
// members and, through the garbage collector the member guard lets
// through, every member's volume. The chart guards that delete as it
// guards a member's, and lets neither the garbage collector nor the
// operator through.
func TestClusterDeletionGuardByDefault(t *testing.T) {
	g := renderGuardOf(t, "-protect-clusters", nil)
	g.checkRendered(t, "eo-etcd-operator-protect-clusters")
	spec := g.policy.Spec
	wantRule := admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Delete},
		Rule: admissionv1.Rule{APIGroups: []string{"etcd-operator.cozystack.io"}, APIVersions: []string{"*"},
			Resources: []string{"etcdclusters"}},
	}}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) != 1 ||
		!equality.Semantic.DeepEqual(spec.MatchConstraints.ResourceRules[0], wantRule) {
		t.Errorf("matchConstraints = %+v, want DELETE of etcdclusters only", spec.MatchConstraints)
	}
	if len(spec.Validations) != 1 || spec.Validations[0].Reason == nil || *spec.Validations[0].Reason != metav1.StatusReasonForbidden {
		t.Fatalf("validations = %+v, want one with reason Forbidden", spec.Validations)
	}
	for _, want := range []string{"oldObject.metadata.name", "every member's data volume", "kubectl annotate etcdcluster", "etcd-operator.cozystack.io/allow-deletion=true", "snapshot"} {
		if !strings.Contains(spec.Validations[0].MessageExpression, want) {
			t.Errorf("the message does not say %q: %s", want, spec.Validations[0].MessageExpression)
		}
	}
	if !strings.Contains(g.variable(t, "breakGlass"), "'etcd-operator.cozystack.io/allow-deletion'] == 'true'") {
		t.Errorf("breakGlass does not ask for the annotation to be exactly \"true\": %s", g.variable(t, "breakGlass"))
	}
	if !strings.Contains(g.variable(t, "namespaceTerminating"), "namespaceObject.metadata.deletionTimestamp") {
		t.Errorf("namespaceTerminating does not read the namespace's deletion: %s", g.variable(t, "namespaceTerminating"))
	}
	if got := g.allowedUsers(t); !slices.Equal(got, []string{namespaceController}) {
		t.Errorf("allowed users = %q, want the namespace controller alone", got)
	}
	if !slices.Equal(g.binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("validationActions = %v, want [Deny]", g.binding.Spec.ValidationActions)
	}
	if g.binding.Spec.MatchResources != nil {
		t.Errorf("the binding is limited (%+v) though the operator watches every namespace", g.binding.Spec.MatchResources)
	}
}

func TestClusterDeletionGuardValues(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		check  func(*testing.T, guard)
	}{{
		name:   "disabled renders nothing",
		values: map[string]any{"clusterDeletionProtection": map[string]any{"enabled": false}},
		check: func(t *testing.T, g guard) {
			if g.policy != nil || g.binding != nil {
				t.Error("the policy or its binding is rendered with clusterDeletionProtection.enabled=false")
			}
		},
	}, {
		name:   "the member guard's switch leaves it alone",
		values: map[string]any{"memberDeletionProtection": map[string]any{"enabled": false, "additionalAllowedUsers": []any{"oidc:member-admin"}}},
		check: func(t *testing.T, g guard) {
			if g.policy == nil || !slices.Equal(g.allowedUsers(t), []string{namespaceController}) {
				t.Error("turning the member guard off or widening it changed the cluster guard")
			}
		},
	}, {
		name:   "more users come after the namespace controller",
		values: map[string]any{"clusterDeletionProtection": map[string]any{"additionalAllowedUsers": []any{"system:serviceaccount:flux-system:kustomize-controller", `odd "name" <x>`}}},
		check: func(t *testing.T, g guard) {
			want := []string{namespaceController, "system:serviceaccount:flux-system:kustomize-controller", `odd "name" <x>`}
			if got := g.allowedUsers(t); !slices.Equal(got, want) {
				t.Errorf("allowed users = %q, want %q", got, want)
			}
		},
	}, {
		name:   "the name follows fullnameOverride",
		values: map[string]any{"fullnameOverride": "etcd-op"},
		check: func(t *testing.T, g guard) {
			if g.policy.Name != "etcd-op-protect-clusters" || g.binding.Spec.PolicyName != g.policy.Name {
				t.Errorf("policy %q, binding to %q; want etcd-op-protect-clusters", g.policy.Name, g.binding.Spec.PolicyName)
			}
		},
	}, {
		name:   "watched namespaces limit the binding",
		values: map[string]any{"manager": map[string]any{"watchNamespaces": []any{"team-a", "team-b"}}},
		check: func(t *testing.T, g guard) {
			want := &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"},
			}}}}
			if !equality.Semantic.DeepEqual(g.binding.Spec.MatchResources, want) {
				t.Errorf("matchResources = %+v, want %+v", g.binding.Spec.MatchResources, want)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, renderGuardOf(t, "-protect-clusters", tc.values))
		})
	}
}

// TestDeletionGuardsNeedKubernetes130 installs the chart on a cluster
// older than the guards' API (ValidatingAdmissionPolicy is v1 from 1.30):
// the install is refused, naming each guard still on, rather than failing
// half-way on an unknown kind, and goes through with every guard off.
func TestDeletionGuardsNeedKubernetes130(t *testing.T) {
	off := map[string]any{"enabled": false}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
		absent string
	}{
		{"both on", nil, []string{"1.30", "memberDeletionProtection.enabled=false", "clusterDeletionProtection.enabled=false"}, ""},
		{"the member guard off", map[string]any{"memberDeletionProtection": off}, []string{"1.30", "clusterDeletionProtection.enabled=false"}, "memberDeletionProtection"},
		{"the cluster guard off", map[string]any{"clusterDeletionProtection": off}, []string{"1.30", "memberDeletionProtection.enabled=false"}, "clusterDeletionProtection"},
	} {
		_, err := tools.RenderChartFor("1.29.8", "eo", "ops", tc.values)
		if err == nil {
			t.Errorf("%s: the chart rendered a guard for Kubernetes 1.29, which has no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy", tc.name)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the refusal does not say %q: %v", tc.name, want, err)
			}
		}
		if tc.absent != "" && strings.Contains(err.Error(), tc.absent) {
			t.Errorf("%s: the refusal names %s, which is off: %v", tc.name, tc.absent, err)
		}
	}
	objs, err := tools.RenderChartFor("1.29.8", "eo", "ops", map[string]any{"memberDeletionProtection": off, "clusterDeletionProtection": off, "survivorMarkProtection": off})
	if err != nil {
		t.Fatalf("with every guard off the chart should install on 1.29: %v", err)
	}
	for _, obj := range objs {
		if strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("the guards are off, yet the chart renders %s %s", obj.GetKind(), obj.GetName())
		}
	}
	if _, err := tools.RenderChartFor("1.30.0", "eo", "ops", nil); err != nil {
		t.Errorf("on 1.30 the guards should install: %v", err)
	}
}
