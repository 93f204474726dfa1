package charts

import (
	"maps"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// chartOperator is the operator's ServiceAccount as the chart, released as
// eo in namespace ops, names it.
const chartOperator = "system:serviceaccount:ops:eo-etcd-operator"

// TestSurvivorMarkGuardByDefault: the survivor mark of a recovery restarts
// a member with --force-new-cluster, so the chart lets only the operator
// set it, on creating or updating an EtcdMember (never through its
// subresources), and asks nothing of a request that does not set it.
func TestSurvivorMarkGuardByDefault(t *testing.T) {
	g := renderGuardOf(t, "-protect-survivor-mark", nil)
	g.checkRendered(t, "eo-etcd-operator-protect-survivor-mark")
	spec := g.policy.Spec
	rule := func(group, version, resource string) admissionv1.NamedRuleWithOperations {
		return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
			Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}},
		}}
	}
	want := []admissionv1.NamedRuleWithOperations{rule("etcd-operator.cozystack.io", "*", "etcdmembers"), rule("", "v1", "pods")}
	if spec.MatchConstraints == nil || !equality.Semantic.DeepEqual(spec.MatchConstraints.ResourceRules, want) {
		t.Errorf("matchConstraints = %+v, want CREATE and UPDATE of etcdmembers and pods only, no subresource", spec.MatchConstraints)
	}
	checkSetsTheMark(t, spec.MatchConditions)
	if len(spec.Validations) != 1 || spec.Validations[0].Reason == nil || *spec.Validations[0].Reason != metav1.StatusReasonForbidden {
		t.Fatalf("validations = %+v, want one with reason Forbidden", spec.Validations)
	}
	checkRefusal(t, spec.Validations[0])
	if got := g.allowedUsers(t); !slices.Equal(got, []string{chartOperator}) {
		t.Errorf("allowed users = %q, want the operator alone", got)
	}
	if !slices.Equal(g.binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("validationActions = %v, want [Deny]", g.binding.Spec.ValidationActions)
	}
	if g.binding.Spec.MatchResources != nil {
		t.Errorf("the binding is limited (%+v) though the operator watches every namespace", g.binding.Spec.MatchResources)
	}
}

// checkSetsTheMark checks that one match condition reads the mark on the
// new object and the old one: what it admits is pinned on a real API
// server in test/api.
func checkSetsTheMark(t *testing.T, conditions []admissionv1.MatchCondition) {
	t.Helper()
	if len(conditions) != 1 {
		t.Fatalf("matchConditions = %+v, want one", conditions)
	}
	expr := conditions[0].Expression
	for _, want := range []string{
		"'" + manifest.AnnotationForceNewCluster + "' in object.metadata.annotations",
		"oldObject == null",
		"oldObject.metadata.annotations['" + manifest.AnnotationForceNewCluster + "'] !=",
	} {
		if !strings.Contains(expr, want) {
			t.Errorf("the match condition does not read %q: %s", want, expr)
		}
	}
}

// checkRefusal checks that the validation asks only who sets the mark, and
// that its messages say what the mark does and how to recover instead.
func checkRefusal(t *testing.T, v admissionv1.Validation) {
	t.Helper()
	if v.Expression != "request.userInfo.username in variables.allowedUsers" {
		t.Errorf("the validation is %q, want it to ask only who sets the mark", v.Expression)
	}
	if !strings.Contains(v.MessageExpression, "object.metadata.name") {
		t.Errorf("the message does not name the member: %s", v.MessageExpression)
	}
	for _, want := range []string{manifest.AnnotationForceNewCluster, "--force-new-cluster", "Only the operator", "kubectl etcd recover", manifest.AnnotationRecover} {
		if !strings.Contains(v.MessageExpression, want) {
			t.Errorf("the message does not say %q: %s", want, v.MessageExpression)
		}
		if !strings.Contains(v.Message, want) {
			t.Errorf("the fallback message does not say %q: %s", want, v.Message)
		}
	}
}

func TestSurvivorMarkGuardValues(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		check  func(*testing.T, guard)
	}{{
		name:   "disabled renders nothing",
		values: map[string]any{"survivorMarkProtection": map[string]any{"enabled": false}},
		check: func(t *testing.T, g guard) {
			if g.policy != nil || g.binding != nil {
				t.Error("the policy or its binding is rendered with survivorMarkProtection.enabled=false")
			}
		},
	}, {
		name: "the deletion guards' values leave it alone",
		values: map[string]any{
			"memberDeletionProtection":  map[string]any{"enabled": false, "additionalAllowedUsers": []any{"oidc:member-admin"}},
			"clusterDeletionProtection": map[string]any{"enabled": false, "additionalAllowedUsers": []any{"oidc:cluster-admin"}},
		},
		check: func(t *testing.T, g guard) {
			if g.policy == nil || !slices.Equal(g.allowedUsers(t), []string{chartOperator}) {
				t.Error("turning the deletion guards off or widening them changed the survivor mark's guard")
			}
		},
	}, {
		name:   "more users come after the operator",
		values: map[string]any{"survivorMarkProtection": map[string]any{"additionalAllowedUsers": []any{"oidc:ops@example.com", `odd "name" <x>`}}},
		check: func(t *testing.T, g guard) {
			want := []string{chartOperator, "oidc:ops@example.com", `odd "name" <x>`}
			if got := g.allowedUsers(t); !slices.Equal(got, want) {
				t.Errorf("allowed users = %q, want %q", got, want)
			}
		},
	}, {
		name:   "a ServiceAccount of the user's",
		values: map[string]any{"serviceAccount": map[string]any{"create": false, "name": "byo-sa"}},
		check: func(t *testing.T, g guard) {
			if got := g.allowedUsers(t); !slices.Equal(got, []string{"system:serviceaccount:ops:byo-sa"}) {
				t.Errorf("allowed users = %q, want the operator's ServiceAccount byo-sa", got)
			}
		},
	}, {
		name:   "the name follows fullnameOverride",
		values: map[string]any{"fullnameOverride": "etcd-op"},
		check: func(t *testing.T, g guard) {
			if g.policy.Name != "etcd-op-protect-survivor-mark" || g.binding.Spec.PolicyName != g.policy.Name {
				t.Errorf("policy %q, binding to %q; want etcd-op-protect-survivor-mark", g.policy.Name, g.binding.Spec.PolicyName)
			}
			if got := g.allowedUsers(t); got[0] != "system:serviceaccount:ops:etcd-op" {
				t.Errorf("the operator's ServiceAccount is %q, want etcd-op", got[0])
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
			tc.check(t, renderGuardOf(t, "-protect-survivor-mark", tc.values))
		})
	}
}

// TestSurvivorMarkGuardNeedsKubernetes130: on a cluster older than
// ValidatingAdmissionPolicy v1, the install with only this guard on is
// refused, naming it, and goes through once it is off too.
func TestSurvivorMarkGuardNeedsKubernetes130(t *testing.T) {
	off := map[string]any{"enabled": false}
	deletionGuardsOff := map[string]any{"memberDeletionProtection": off, "clusterDeletionProtection": off}
	_, err := tools.RenderChartFor("1.29.8", "eo", "ops", deletionGuardsOff)
	if err == nil {
		t.Fatal("the chart rendered the survivor mark's guard for Kubernetes 1.29, which has no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy")
	}
	if msg := err.Error(); !strings.Contains(msg, "1.30") || !strings.Contains(msg, "--set survivorMarkProtection.enabled=false") ||
		strings.Contains(msg, "DeletionProtection.enabled=false") {
		t.Errorf("the refusal should name survivorMarkProtection alone, the guard still on: %v", err)
	}
	allOff := map[string]any{"survivorMarkProtection": off}
	maps.Copy(allOff, deletionGuardsOff)
	objs, err := tools.RenderChartFor("1.29.8", "eo", "ops", allOff)
	if err != nil {
		t.Fatalf("with every guard off the chart should install on 1.29: %v", err)
	}
	for _, obj := range objs {
		if strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("the guards are off, yet the chart renders %s %s", obj.GetKind(), obj.GetName())
		}
	}
}
