package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// markGuardPolicy is the survivor mark's guard as TestSurvivorMarkGuard
// installs it (release guard, so the operator is guardOperator);
// markGuardExtraUsers go to survivorMarkProtection.additionalAllowedUsers.
const (
	markGuardPolicy = "guard-etcd-operator-protect-survivor-mark"
	// planToken stands for a recovery plan's token, the mark's value.
	planToken = "3f9c2a71b0de"
)

var markGuardExtraUsers = []string{"oidc:recovery@example.com", `odd "name" <x>\`}

// markCase updates, as user, a member that carries the mark before (none
// when empty, else put there by the operator) with change.
type markCase struct {
	name     string
	user     string
	before   string
	change   func(*unstructured.Unstructured)
	admitted bool
}

func setMark(value string) func(*unstructured.Unstructured) {
	return func(m *unstructured.Unstructured) {
		m.SetAnnotations(map[string]string{manifest.AnnotationForceNewCluster: value})
	}
}

func removeMark(m *unstructured.Unstructured) {
	ann := m.GetAnnotations()
	delete(ann, manifest.AnnotationForceNewCluster)
	m.SetAnnotations(ann)
}

func addLabel(m *unstructured.Unstructured) {
	m.SetLabels(map[string]string{"team": "storage"})
}

var markCases = []markCase{
	{name: "a cluster admin adds the mark", user: "jane", change: setMark(planToken)},
	{name: "a cluster admin changes its value", user: "jane", before: planToken, change: setMark("0123456789ab")},
	{name: "a cluster admin empties it", user: "jane", before: planToken, change: setMark("")},
	{name: "a cluster admin removes it", user: "jane", before: planToken, change: removeMark, admitted: true},
	{name: "a label, the mark left as it is", user: "jane", before: planToken, change: addLabel, admitted: true},
	{name: "a label on an unmarked member", user: "jane", change: addLabel, admitted: true},
	{name: "the operator adds the mark", user: guardOperator, change: setMark(planToken), admitted: true},
	{name: "the operator changes it", user: guardOperator, before: planToken, change: setMark("0123456789ab"), admitted: true},
	{name: "the operator removes it", user: guardOperator, before: planToken, change: removeMark, admitted: true},
	{name: "another ServiceAccount of the operator's namespace", user: "system:serviceaccount:operators:default", change: setMark(planToken)},
	{name: "the operator's ServiceAccount name in another namespace", user: "system:serviceaccount:default:guard-etcd-operator", change: setMark(planToken)},
	{name: "the garbage collector", user: "system:serviceaccount:kube-system:generic-garbage-collector", change: setMark(planToken)},
	{name: "an additional user", user: markGuardExtraUsers[0], change: setMark(planToken), admitted: true},
	{name: "an additional user with quotes and a backslash", user: markGuardExtraUsers[1], change: setMark(planToken), admitted: true},
}

// TestSurvivorMarkGuard installs the chart's guard of the survivor mark,
// limited to one watched namespace, and sets, changes and removes the mark
// as various users, each impersonated in system:masters so that only the
// policy decides. The mark restarts a member's etcd with
// --force-new-cluster: only the operator may put it on, anyone may take it
// off.
func TestSurvivorMarkGuard(t *testing.T) {
	ns := namespace(t)
	installPolicy(t, markGuardPolicy, map[string]any{
		"manager":                map[string]any{"watchNamespaces": []any{ns}},
		"survivorMarkProtection": map[string]any{"additionalAllowedUsers": markGuardExtraUsers},
	})
	waitMarkGuarding(t, ns)

	for _, tc := range markCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, ns) })
	}
	t.Run("the harness's own admin", func(t *testing.T) {
		markCase{before: "", change: setMark(planToken)}.runAs(t, ns, k)
	})
	t.Run("a merge patch adding the mark", func(t *testing.T) {
		m := markedMember(t, ns, "")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, manifest.AnnotationForceNewCluster, planToken)
		err := as(t, "jane").Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch)))
		checkMarkRefused(t, m, "", err)
	})
	t.Run("a cluster admin creates a marked member", func(t *testing.T) {
		m := memberWithMark(t, ns, planToken)
		err := as(t, "jane").Create(context.Background(), m)
		if err == nil {
			t.Fatalf("creating member %s with the mark was admitted, want it refused", m.GetName())
		}
		// The name is generated before admission: the message has it.
		checkMarkMessage(t, err, "marked-")
	})
	t.Run("the operator creates a marked member", func(t *testing.T) {
		m := memberWithMark(t, ns, planToken)
		if err := as(t, guardOperator).Create(context.Background(), m); err != nil {
			t.Fatalf("the operator creating a member with the mark: %v, want it admitted", err)
		}
	})
	t.Run("the status subresource cannot carry the mark", func(t *testing.T) {
		checkStatusDropsTheMark(t, ns)
	})
	t.Run("an unwatched namespace", func(t *testing.T) {
		markCase{user: "jane", change: setMark(planToken), admitted: true}.run(t, namespace(t))
	})
}

func (tc markCase) run(t *testing.T, ns string) {
	tc.runAs(t, ns, as(t, tc.user))
}

func (tc markCase) runAs(t *testing.T, ns string, c client.Client) {
	t.Helper()
	m := markedMember(t, ns, tc.before)
	changed := m.DeepCopy()
	tc.change(changed)
	err := c.Update(context.Background(), changed)
	if tc.admitted {
		checkMarkAdmitted(t, changed, err)
	} else {
		checkMarkRefused(t, m, tc.before, err)
	}
}

// checkStatusDropsTheMark writes a member's status with the mark in its
// metadata: the guard does not look at etcdmembers/status, which is safe
// only because the API server keeps a custom resource's metadata as it was
// on a status write.
func checkStatusDropsTheMark(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	m := markedMember(t, ns, "")
	setMark(planToken)(m)
	if err := unstructured.SetNestedField(m.Object, "marked-pod", "status", "podName"); err != nil {
		t.Fatal(err)
	}
	if err := as(t, "jane").Status().Update(ctx, m); err != nil {
		t.Fatalf("writing member %s's status: %v", m.GetName(), err)
	}
	stored := m.DeepCopy()
	if err := k.Get(ctx, client.ObjectKeyFromObject(m), stored); err != nil {
		t.Fatal(err)
	}
	if pod, _, _ := unstructured.NestedString(stored.Object, "status", "podName"); pod != "marked-pod" {
		t.Fatalf("member %s's status.podName is %q after the status write, want marked-pod", m.GetName(), pod)
	}
	if got := markOf(t, m); got != nil {
		t.Errorf("member %s carries the mark %q after a status write, want none", m.GetName(), *got)
	}
}

// waitMarkGuarding waits until the API server enforces the guard (see
// waitGuarding): a probe creating a marked member is refused by it.
func waitMarkGuarding(t *testing.T, ns string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = as(t, "probe").Create(ctx, memberWithMark(t, ns, planToken))
		return last != nil && strings.Contains(last.Error(), markGuardPolicy), nil
	})
	if err != nil {
		t.Fatalf("the survivor mark's guard is not enforced after 30s: the last probe creation answered %v", last)
	}
}

// memberWithMark is an EtcdMember of ns, not yet created, carrying the mark
// value.
func memberWithMark(t *testing.T, ns, value string) *unstructured.Unstructured {
	t.Helper()
	m := object(t, member, ns, memberMin)
	m.SetGenerateName("marked-")
	m.SetAnnotations(map[string]string{manifest.AnnotationForceNewCluster: value})
	return m
}

// markedMember creates an EtcdMember in ns, carrying the mark value as the
// operator puts it there, or none when value is empty.
func markedMember(t *testing.T, ns, value string) *unstructured.Unstructured {
	t.Helper()
	if value == "" {
		return guardedMember(t, ns)
	}
	m := memberWithMark(t, ns, value)
	if err := as(t, guardOperator).Create(context.Background(), m); err != nil {
		t.Fatalf("creating a marked member as the operator: %v", err)
	}
	return m
}

// markOf reads the mark on the stored member, nil when it has none.
func markOf(t *testing.T, m *unstructured.Unstructured) *string {
	t.Helper()
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(m.GroupVersionKind())
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(m), stored); err != nil {
		t.Fatal(err)
	}
	value, ok := stored.GetAnnotations()[manifest.AnnotationForceNewCluster]
	if !ok {
		return nil
	}
	return &value
}

func checkMarkAdmitted(t *testing.T, want *unstructured.Unstructured, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("updating member %s: %v, want it admitted", want.GetName(), err)
	}
	wantMark, marked := want.GetAnnotations()[manifest.AnnotationForceNewCluster]
	got := markOf(t, want)
	switch {
	case !marked && got != nil:
		t.Errorf("member %s carries the mark %q after an admitted update, want none", want.GetName(), *got)
	case marked && (got == nil || *got != wantMark):
		t.Errorf("member %s carries the mark %v after an admitted update, want %q", want.GetName(), got, wantMark)
	}
}

// checkMarkRefused checks that the guard refused the update and the member
// still carries the mark it had, before (none when empty).
func checkMarkRefused(t *testing.T, m *unstructured.Unstructured, before string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("updating member %s was admitted, want it refused", m.GetName())
	}
	checkMarkMessage(t, err, m.GetName())
	got := markOf(t, m)
	switch {
	case before == "" && got != nil:
		t.Errorf("member %s carries the mark %q after a refused update, want none", m.GetName(), *got)
	case before != "" && (got == nil || *got != before):
		t.Errorf("member %s carries the mark %v after a refused update, want %q", m.GetName(), got, before)
	}
}

// checkMarkMessage checks that the refusal is the guard's, Forbidden, and
// says which member (name, or the start of it), what the mark does, and
// what to do instead.
func checkMarkMessage(t *testing.T, err error, name string) {
	t.Helper()
	checkMarkMessageOf(t, err, "EtcdMember "+name)
}

// checkMarkMessageOf checks the refusal as checkMarkMessage does, for the
// object it names ("Kind name").
func checkMarkMessageOf(t *testing.T, err error, object string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonForbidden {
		t.Fatalf("got %v, want Forbidden", err)
	}
	msg := err.Error()
	for _, want := range []string{
		fmt.Sprintf("ValidatingAdmissionPolicy '%s'", markGuardPolicy),
		object,
		manifest.AnnotationForceNewCluster,
		"--force-new-cluster as the only member",
		"Only the operator sets it",
		"kubectl etcd recover -n ",
		" -c c --dry-run",
		manifest.AnnotationRecover + "=dry-run",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
}
