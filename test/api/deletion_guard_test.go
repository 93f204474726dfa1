package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The guard as TestMemberDeletionGuard installs it: release guard in
// namespace operators, so the operator runs as guardOperator.
const (
	guardRelease   = "guard"
	guardNamespace = "operators"
	guardOperator  = "system:serviceaccount:operators:guard-etcd-operator"
	guardPolicy    = "guard-etcd-operator-protect-members"
)

// guardExtraUsers go to memberDeletionProtection.additionalAllowedUsers; the
// second makes sure any username survives its way into the CEL expression.
var guardExtraUsers = []string{"oidc:ops@example.com", `odd "name" <x>\`}

// deletionCase deletes one fresh EtcdMember as user, after user set the
// allow-deletion annotation to annotation (when not empty).
type deletionCase struct {
	name       string
	user       string
	annotation string
	admitted   bool
}

var deletionCases = []deletionCase{
	{name: "a cluster admin", user: "jane"},
	{name: "break-glass annotation", user: "jane", annotation: "true", admitted: true},
	{name: "annotation True is not true", user: "jane", annotation: "True"},
	{name: "annotation yes is not true", user: "jane", annotation: "yes"},
	{name: "the operator", user: guardOperator, admitted: true},
	{name: "another ServiceAccount of the operator's namespace", user: "system:serviceaccount:operators:default"},
	{name: "the operator's ServiceAccount name in another namespace", user: "system:serviceaccount:default:guard-etcd-operator"},
	{name: "the garbage collector", user: "system:serviceaccount:kube-system:generic-garbage-collector", admitted: true},
	{name: "the namespace controller", user: "system:serviceaccount:kube-system:namespace-controller", admitted: true},
	{name: "the controller manager without per-controller credentials", user: "system:kube-controller-manager", admitted: true},
	{name: "an additional user", user: guardExtraUsers[0], admitted: true},
	{name: "an additional user with quotes and a backslash", user: guardExtraUsers[1], admitted: true},
}

// TestMemberDeletionGuard installs the chart's ValidatingAdmissionPolicy and
// its binding, limited to one watched namespace, and deletes EtcdMembers as
// various users. Every user is impersonated in system:masters, so RBAC lets
// each request through and only the policy decides.
func TestMemberDeletionGuard(t *testing.T) {
	ns := namespace(t)
	installGuard(t, ns)
	waitGuarding(t, ns)

	for _, tc := range deletionCases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, ns)
		})
	}
	t.Run("the harness's own admin", func(t *testing.T) {
		m := guardedMember(t, ns)
		checkRefused(t, m, k.Delete(context.Background(), m))
	})
	t.Run("an unwatched namespace", func(t *testing.T) {
		m := guardedMember(t, namespace(t))
		checkAdmitted(t, m, as(t, "jane").Delete(context.Background(), m))
	})
	t.Run("other kinds", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "other-", Namespace: ns}}
		if err := k.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		if err := as(t, "jane").Delete(context.Background(), cm); err != nil {
			t.Errorf("deleting a ConfigMap where members are guarded: %v", err)
		}
	})
	t.Run("a collection", func(t *testing.T) { checkCollectionRefused(t, ns) })
}

func (tc deletionCase) run(t *testing.T, ns string) {
	ctx := context.Background()
	m := guardedMember(t, ns)
	c := as(t, tc.user)
	if tc.annotation != "" {
		// Setting the annotation is an update, which the guard leaves alone.
		m.SetAnnotations(map[string]string{manifest.AnnotationAllowDeletion: tc.annotation})
		if err := c.Update(ctx, m); err != nil {
			t.Fatalf("annotating the member as %s: %v", tc.user, err)
		}
	}
	err := c.Delete(ctx, m)
	if tc.admitted {
		checkAdmitted(t, m, err)
	} else {
		checkRefused(t, m, err)
	}
}

// checkCollectionRefused deletes every member of the namespace in one
// request: the API server admits each item on its own, so the guard refuses
// them all and every member stays.
func checkCollectionRefused(t *testing.T, ns string) {
	ctx := context.Background()
	m := guardedMember(t, ns)
	before := countMembers(t, ns)
	err := as(t, "jane").DeleteAllOf(ctx, m, client.InNamespace(ns))
	if err == nil || !strings.Contains(err.Error(), guardPolicy) {
		t.Errorf("deleting every member at once: got %v, want a refusal by %s", err, guardPolicy)
	}
	if after := countMembers(t, ns); after != before {
		t.Errorf("%d of %d members are gone after a refused collection delete", before-after, before)
	}
}

// installGuard renders the chart's member guard for a release watching ns
// and creates it; the test's cleanup takes it away again.
func installGuard(t *testing.T, ns string) {
	t.Helper()
	installPolicy(t, guardPolicy, map[string]any{
		"manager":                  map[string]any{"watchNamespaces": []any{ns}},
		"memberDeletionProtection": map[string]any{"additionalAllowedUsers": guardExtraUsers},
	})
}

// installPolicy renders the chart with values as release guard and
// creates the ValidatingAdmissionPolicy named policy with its binding; the
// test's cleanup takes them away again.
func installPolicy(t *testing.T, policy string, values map[string]any) {
	t.Helper()
	objs, err := tools.RenderChart(guardRelease, guardNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var guard []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetAPIVersion() == admissionv1.SchemeGroupVersion.String() && obj.GetName() == policy {
			guard = append(guard, obj)
		}
	}
	if len(guard) != 2 {
		t.Fatalf("the chart renders %d admission objects named %s, want the policy and its binding", len(guard), policy)
	}
	for _, obj := range guard {
		if err := k.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			if err := k.Delete(context.Background(), obj); err != nil {
				t.Errorf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
	}
}

// waitGuarding waits until the API server enforces the policy: its
// admission plugin learns of policies and bindings through an informer.
// (The policy's status, where the server's type checker would report on
// its expressions, is written by kube-controller-manager, which does not
// run here; the cases below evaluate every expression instead.)
func waitGuarding(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := guardedMember(t, ns)
		last = as(t, "probe").Delete(ctx, probe)
		return last != nil && strings.Contains(last.Error(), guardPolicy), nil
	})
	if err != nil {
		t.Fatalf("the guard is not enforced after 30s: the last probe deletion answered %v", last)
	}
}

// guardedMember creates an EtcdMember in ns; it has no finalizer, so an
// admitted deletion removes it at once.
func guardedMember(t *testing.T, ns string) *unstructured.Unstructured {
	t.Helper()
	m := object(t, member, ns, memberMin)
	m.SetGenerateName("guarded-")
	if err := k.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// as is a client of the test API server acting as user, in system:masters.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkAdmitted(t *testing.T, m *unstructured.Unstructured, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("deleting member %s: %v, want it admitted", m.GetName(), err)
	}
	err = k.Get(context.Background(), client.ObjectKeyFromObject(m), m.DeepCopy())
	if !apierrors.IsNotFound(err) {
		t.Errorf("member %s after an admitted deletion: %v, want it gone", m.GetName(), err)
	}
}

// checkRefused checks that the policy refused the deletion, saying which
// member, why, and what to do instead.
func checkRefused(t *testing.T, m *unstructured.Unstructured, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("deleting member %s was admitted, want it refused", m.GetName())
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonForbidden {
		t.Fatalf("deleting member %s: %v, want Forbidden", m.GetName(), err)
	}
	msg := err.Error()
	for _, want := range []string{
		fmt.Sprintf("ValidatingAdmissionPolicy '%s'", guardPolicy),
		"EtcdMember " + m.GetName() + " in namespace " + m.GetNamespace(),
		"removes the member from etcd and releases its data volume",
		"scale the EtcdCluster",
		manifest.AnnotationAllowDeletion + "=true",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(m), m.DeepCopy()); err != nil {
		t.Errorf("member %s after a refused deletion: %v, want it still there", m.GetName(), err)
	}
}

func countMembers(t *testing.T, ns string) int {
	t.Helper()
	list := &v1alpha2.EtcdMemberList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
