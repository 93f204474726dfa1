// Package charts holds the tests of the operator's Helm chart as it renders;
// what the rendered objects do on a real API server is tested in test/api.
package charts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// builtInAllowed are the users the guard always lets delete members, after
// the operator's own ServiceAccount.
var builtInAllowed = []string{
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:serviceaccount:kube-system:namespace-controller",
	"system:kube-controller-manager",
}

// guard is the member-deletion guard as one render of the chart makes it.
type guard struct {
	policy  *admissionv1.ValidatingAdmissionPolicy
	binding *admissionv1.ValidatingAdmissionPolicyBinding
}

func TestMemberDeletionGuardByDefault(t *testing.T) {
	g := renderGuard(t, nil)
	g.checkRendered(t, "eo-etcd-operator-protect-members")
	spec := g.policy.Spec
	wantRule := admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Delete},
		Rule: admissionv1.Rule{APIGroups: []string{"etcd-operator.cozystack.io"}, APIVersions: []string{"*"},
			Resources: []string{"etcdmembers"}},
	}}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) != 1 ||
		!equality.Semantic.DeepEqual(spec.MatchConstraints.ResourceRules[0], wantRule) {
		t.Errorf("matchConstraints = %+v, want DELETE of etcdmembers only", spec.MatchConstraints)
	}
	if len(spec.Validations) != 1 || spec.Validations[0].Reason == nil || *spec.Validations[0].Reason != metav1.StatusReasonForbidden {
		t.Fatalf("validations = %+v, want one with reason Forbidden", spec.Validations)
	}
	for _, want := range []string{"oldObject.metadata.name", "scale the EtcdCluster", "etcd-operator.cozystack.io/allow-deletion=true", "releases its data volume"} {
		if !strings.Contains(spec.Validations[0].MessageExpression, want) {
			t.Errorf("the message does not say %q: %s", want, spec.Validations[0].MessageExpression)
		}
	}
	if !strings.Contains(g.variable(t, "breakGlass"), "'etcd-operator.cozystack.io/allow-deletion'] == 'true'") {
		t.Errorf("breakGlass does not ask for the annotation to be exactly \"true\": %s", g.variable(t, "breakGlass"))
	}
	wantUsers := append([]string{"system:serviceaccount:ops:eo-etcd-operator"}, builtInAllowed...)
	if got := g.allowedUsers(t); !slices.Equal(got, wantUsers) {
		t.Errorf("allowed users = %q, want %q", got, wantUsers)
	}
	if !slices.Equal(g.binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("validationActions = %v, want [Deny]", g.binding.Spec.ValidationActions)
	}
	if g.binding.Spec.MatchResources != nil {
		t.Errorf("the binding is limited (%+v) though the operator watches every namespace", g.binding.Spec.MatchResources)
	}
}

func TestMemberDeletionGuardValues(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		check  func(*testing.T, guard)
	}{{
		name:   "disabled renders nothing",
		values: map[string]any{"memberDeletionProtection": map[string]any{"enabled": false}},
		check: func(t *testing.T, g guard) {
			if g.policy != nil || g.binding != nil {
				t.Error("the policy or its binding is rendered with memberDeletionProtection.enabled=false")
			}
		},
	}, {
		name:   "more users come after the built-in ones",
		values: map[string]any{"memberDeletionProtection": map[string]any{"additionalAllowedUsers": []any{"oidc:ops@example.com", `odd "name" <x>`}}},
		check: func(t *testing.T, g guard) {
			want := append(append([]string{"system:serviceaccount:ops:eo-etcd-operator"}, builtInAllowed...), "oidc:ops@example.com", `odd "name" <x>`)
			if got := g.allowedUsers(t); !slices.Equal(got, want) {
				t.Errorf("allowed users = %q, want %q", got, want)
			}
		},
	}, {
		name:   "a ServiceAccount of the user's",
		values: map[string]any{"serviceAccount": map[string]any{"create": false, "name": "byo-sa"}},
		check: func(t *testing.T, g guard) {
			if got := g.allowedUsers(t); len(got) == 0 || got[0] != "system:serviceaccount:ops:byo-sa" {
				t.Errorf("allowed users = %q, want the operator's ServiceAccount byo-sa first", got)
			}
		},
	}, {
		name:   "the name follows fullnameOverride",
		values: map[string]any{"fullnameOverride": "etcd-op"},
		check: func(t *testing.T, g guard) {
			if g.policy.Name != "etcd-op-protect-members" || g.binding.Spec.PolicyName != g.policy.Name {
				t.Errorf("policy %q, binding to %q; want etcd-op-protect-members", g.policy.Name, g.binding.Spec.PolicyName)
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
			tc.check(t, renderGuard(t, tc.values))
		})
	}
}

// checkRendered checks that the guard's policy and binding are both
// rendered, named name, carry the chart's labels, and fail closed.
func (g guard) checkRendered(t *testing.T, name string) {
	t.Helper()
	if g.policy == nil || g.binding == nil {
		t.Fatalf("rendered policy %v and binding %v, want both", g.policy != nil, g.binding != nil)
	}
	if g.policy.Name != name || g.binding.Name != name || g.binding.Spec.PolicyName != name {
		t.Errorf("names: policy %q, binding %q pointing at %q; want %q for all", g.policy.Name, g.binding.Name, g.binding.Spec.PolicyName, name)
	}
	if g.policy.Labels["app.kubernetes.io/instance"] != "eo" || g.binding.Labels["app.kubernetes.io/name"] != "etcd-operator" {
		t.Errorf("the chart's labels are missing: %v, %v", g.policy.Labels, g.binding.Labels)
	}
	if fp := g.policy.Spec.FailurePolicy; fp == nil || *fp != admissionv1.Fail {
		t.Errorf("failurePolicy = %v, want Fail", fp)
	}
}

// renderGuard renders the chart as release eo in namespace ops and picks
// out the member guard's objects.
func renderGuard(t *testing.T, values map[string]any) guard {
	t.Helper()
	return renderGuardOf(t, "-protect-members", values)
}

// renderGuardOf renders the chart as release eo in namespace ops and picks
// out the guard whose policy and binding are named with suffix.
func renderGuardOf(t *testing.T, suffix string, values map[string]any) guard {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	var g guard
	for _, obj := range objs {
		if !strings.HasSuffix(obj.GetName(), suffix) {
			continue
		}
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			g.policy = &admissionv1.ValidatingAdmissionPolicy{}
			fromUnstructured(t, obj, g.policy)
		case "ValidatingAdmissionPolicyBinding":
			g.binding = &admissionv1.ValidatingAdmissionPolicyBinding{}
			fromUnstructured(t, obj, g.binding)
		}
	}
	return g
}

func fromUnstructured(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

func (g guard) variable(t *testing.T, name string) string {
	t.Helper()
	for _, v := range g.policy.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	t.Fatalf("the policy has no variable %s", name)
	return ""
}

// allowedUsers reads the list of allowed users. The chart writes it as a
// JSON array, which is a CEL list literal too.
func (g guard) allowedUsers(t *testing.T) []string {
	t.Helper()
	var users []string
	if err := json.Unmarshal([]byte(g.variable(t, "allowedUsers")), &users); err != nil {
		t.Fatalf("allowedUsers is not a JSON list of strings: %v", err)
	}
	return users
}
