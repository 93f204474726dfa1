package kubectletcd

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// recoveryOperator stands in for the operator's recovery stage: before each
// read of the EtcdCluster it answers the annotation as the planner does.
// lost says whether the cluster has lost its quorum; plan is the token of
// the current plan. A consented recovery moves one phase per read.
type recoveryOperator struct {
	lost   bool
	plan   string
	silent bool
	// phases the consented recovery went through.
	phases []string
}

func (o *recoveryOperator) answer(c *v1alpha2.EtcdCluster) {
	req := c.Annotations[manifest.AnnotationRecover]
	rec := c.Status.Recovery
	switch {
	case o.silent || req == "":
		return
	case rec != nil && rec.Request == req && rec.Phase != v1alpha2.RecoveryPlanned:
		// Under way: one phase on.
		next := map[string]string{
			v1alpha2.RecoveryForcingNewCluster: v1alpha2.RecoveryRemovingLost,
			v1alpha2.RecoveryRemovingLost:      v1alpha2.RecoveryRegrowing,
			v1alpha2.RecoveryRegrowing:         v1alpha2.RecoveryCompleted,
		}[rec.Phase]
		if next != "" {
			rec.Phase, rec.Message = next, "now "+next
			o.phases = append(o.phases, next)
		}
	case !o.lost:
		c.Status.Recovery = &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryNotNeeded, Request: req, Message: "etcd has a leader and a quorum"}
	case req == o.plan && rec != nil && rec.Phase == v1alpha2.RecoveryPlanned && rec.Token == req:
		// As the operator: consent only to the plan it recorded.
		c.Status.Recovery = o.planned(req)
		c.Status.Recovery.Phase, c.Status.Recovery.Message = v1alpha2.RecoveryForcingNewCluster, "Restarting c-a"
		o.phases = append(o.phases, v1alpha2.RecoveryForcingNewCluster)
	default:
		p := o.planned(req)
		if req != manifest.RecoverDryRun {
			p.Message = "The annotation's token is not the current plan's. " + p.Message
		}
		c.Status.Recovery = p
	}
}

func (o *recoveryOperator) planned(req string) *v1alpha2.RecoveryStatus {
	return &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryPlanned, Request: req, Token: o.plan,
		Message:  "Restart c-a alone, then delete c-b, c-c",
		Survivor: &v1alpha2.RecoveryMember{Name: "c-a", MemberID: "00000000000000aa", AppliedIndex: ptr.To[int64](120)},
		Discarded: []v1alpha2.RecoveryMember{
			{Name: "c-b", MemberID: "00000000000000bb", AppliedIndex: ptr.To[int64](90), LastSeen: &metav1.Time{}, State: "lost"},
			{Name: "c-c", State: "no Pod"},
		}}
}

// withOperator puts the stand-in in front of the fake API server.
func (f *fakeEnv) withOperator(t *testing.T, o *recoveryOperator) {
	t.Helper()
	f.kube = interceptor.NewClient(f.api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha2.EtcdCluster); ok {
				o.step(ctx, t, c, key)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// step answers once, as the operator's pass would.
func (o *recoveryOperator) step(ctx context.Context, t *testing.T, c client.WithWatch, key client.ObjectKey) {
	cur := &v1alpha2.EtcdCluster{}
	if err := c.Get(ctx, key, cur); err != nil {
		return
	}
	before := cur.Status.DeepCopy()
	o.answer(cur)
	if equalRecovery(before.Recovery, cur.Status.Recovery) {
		return
	}
	if err := c.Update(ctx, cur); err != nil {
		t.Errorf("the stand-in operator's status write: %v", err)
	}
}

func equalRecovery(a, b *v1alpha2.RecoveryStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func clusterAnnotation(t *testing.T, f *fakeEnv) string {
	t.Helper()
	c := &v1alpha2.EtcdCluster{}
	if err := f.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c"}, c); err != nil {
		t.Fatal(err)
	}
	return c.Annotations[manifest.AnnotationRecover]
}

func TestRecoverRefusesWithoutConsentFlags(t *testing.T) {
	env := threeMembers(t)
	for _, args := range [][]string{
		{"recover", "-c", "c"},
		{"recover", "-c", "c", "--dry-run", "--yes"},
		{"recover", "-c", "c", "--dry-run", "--plan-token", "x"},
		{"recover", "-c", "c", "--yes", "--plan-token", "x"},
		{"recover", "-c", "c", "--token", "x"},
		{"recover", "--dry-run"},
	} {
		code, _, errOut := env.run(args...)
		if code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
	if _, _, errOut := env.run("recover", "-c", "c"); !strings.Contains(errOut, "--dry-run first") {
		t.Errorf("the refusal does not say what to do: %s", errOut)
	}
	// --token was the plan's token before it became kubectl's bearer token.
	if _, _, errOut := env.run("recover", "-c", "c", "--token", "tok1"); !strings.Contains(errOut, "the plan's token goes to --plan-token") {
		t.Errorf("--token alone does not point to --plan-token: %s", errOut)
	}
	if got := clusterAnnotation(t, env); got != "" {
		t.Errorf("a refused command annotated the cluster: %q", got)
	}
}

func TestRecoverDryRunShowsThePlan(t *testing.T) {
	env := threeMembers(t)
	op := &recoveryOperator{lost: true, plan: "tok1"}
	env.withOperator(t, op)
	code, out, errOut := env.run("recover", "-c", "c", "-n", "ns", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Survivor: c-a", "applied index 120", "c-b", "00000000000000bb", "90", "c-c", "no Pod", "Token: tok1",
		"kubectl etcd recover -c c -n ns --plan-token tok1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not show %q:\n%s", want, out)
		}
	}
	if got := clusterAnnotation(t, env); got != manifest.RecoverDryRun {
		t.Errorf("annotation %q, want dry-run", got)
	}
	if len(op.phases) != 0 {
		t.Errorf("a dry run started a recovery: %v", op.phases)
	}
}

func TestRecoverWithTheTokenFollowsToTheEnd(t *testing.T) {
	env := threeMembers(t)
	op := &recoveryOperator{lost: true, plan: "tok1"}
	env.withOperator(t, op)
	if code, _, errOut := env.run("recover", "-c", "c", "--dry-run"); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	code, out, errOut := env.run("recover", "-c", "c", "--plan-token", "tok1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Recovery Completed") || !strings.Contains(out, "c-b, c-c") {
		t.Errorf("output:\n%s", out)
	}
	if strings.Join(op.phases, ",") != "ForcingNewCluster,RemovingLost,Regrowing,Completed" {
		t.Errorf("phases %v", op.phases)
	}
}

func TestRecoverYesDoesTheDryRunThenConsents(t *testing.T) {
	env := threeMembers(t)
	op := &recoveryOperator{lost: true, plan: "tok9"}
	env.withOperator(t, op)
	code, out, errOut := env.run("recover", "-c", "c", "--yes", "--wait=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Token: tok9") || !strings.Contains(out, "Recovery ForcingNewCluster") {
		t.Errorf("output:\n%s", out)
	}
	if got := clusterAnnotation(t, env); got != "tok9" {
		t.Errorf("annotation %q, want the plan's token", got)
	}
}

func TestRecoverWithAStaleTokenShowsTheNewPlan(t *testing.T) {
	env := threeMembers(t)
	op := &recoveryOperator{lost: true, plan: "tok2"}
	env.withOperator(t, op)
	code, out, errOut := env.run("recover", "-c", "c", "--plan-token", "tok1")
	if code != 1 || !strings.Contains(errOut, "not the current plan's") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Token: tok2") || len(op.phases) != 0 {
		t.Errorf("output %s, phases %v", out, op.phases)
	}
}

func TestRecoverOnAHealthyClusterIsNotNeeded(t *testing.T) {
	env := threeMembers(t)
	env.withOperator(t, &recoveryOperator{plan: "tok1"})
	code, _, errOut := env.run("recover", "-c", "c", "--dry-run", "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "leader and a quorum") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestRecoverPrintsJSON(t *testing.T) {
	env := threeMembers(t)
	env.withOperator(t, &recoveryOperator{lost: true, plan: "tok1"})
	code, out, errOut := env.run("recover", "-c", "c", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rec Recovery
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Kind != "Recovery" || rec.Token != "tok1" || rec.Survivor == nil {
		t.Errorf("%v: %s", err, out)
	}
}

func TestRecoverGivesUpWhenNoOperatorAnswers(t *testing.T) {
	env := threeMembers(t)
	env.withOperator(t, &recoveryOperator{silent: true})
	code, _, errOut := env.run("recover", "-c", "c", "--dry-run", "--timeout", "50ms")
	if code != 1 || !strings.Contains(errOut, "did not answer") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestRecoverNeedsTheCluster(t *testing.T) {
	env := threeMembers(t)
	code, _, errOut := env.run("recover", "-c", "nope", "--dry-run")
	if code != 1 || !strings.Contains(errOut, `etcdcluster "nope" not found`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
