package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// memberWrites is what the API server was asked to do with EtcdMembers.
type memberWrites struct {
	created []*v1alpha2.EtcdMember // as sent, before the server filled anything in
	patches int                    // of the object itself, not its status
}

// actReconciler builds a reconciler on a fake API server that records the
// EtcdMember writes it gets.
func actReconciler(t *testing.T) (*Reconciler, client.Client, *memberWrites) {
	t.Helper()
	writes := &memberWrites{}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&v1alpha2.EtcdMember{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if m, ok := obj.(*v1alpha2.EtcdMember); ok {
					writes.created = append(writes.created, m.DeepCopy())
				}
				return c.Create(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*v1alpha2.EtcdMember); ok {
					writes.patches++
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &Reconciler{Client: c, APIReader: c, Recorder: &fakeEvents{}, Clock: clocktesting.NewFakeClock(t0)}
	return r, c, writes
}

// A new member is created with everything its Pod needs that depends on its
// name, so that the member controller can start the Pod on the create
// alone: a seed with its initialCluster, a joiner (with the join gate) with
// the membership it joins, both with the finalizer. Each later write to the
// member is a round trip through both controllers before its Pod exists.
func TestSeedIsCreatedStartable(t *testing.T) {
	r, c, writes := actReconciler(t)
	w := healthyWorld(0, func(w *world) { w.cluster.Status.ClusterID = "" })
	if o := r.act(context.Background(), w, &change{kind: createSeed}); o.err != nil {
		t.Fatal(o.err)
	}
	if len(writes.created) != 1 {
		t.Fatalf("created %d members, want the seed alone", len(writes.created))
	}
	sent := writes.created[0]
	if !sent.Spec.Bootstrap || !strings.HasPrefix(sent.Name, "c-") {
		t.Fatalf("created %q (bootstrap %v), want a seed named after cluster c", sent.Name, sent.Spec.Bootstrap)
	}
	if want := sent.Name + "=" + manifest.PeerURL(sent); sent.Spec.InitialCluster != want {
		t.Errorf("seed created with initialCluster %q, want %q", sent.Spec.InitialCluster, want)
	}
	if !controllerutil.ContainsFinalizer(sent, manifest.MemberFinalizer) {
		t.Errorf("seed created without the finalizer %s: %v", manifest.MemberFinalizer, sent.Finalizers)
	}
	if got := sent.Labels[manifest.LabelComponent]; got != sent.Name {
		t.Errorf("seed created with component label %q, want its name", got)
	}
	if writes.patches != 0 {
		t.Errorf("the seed was patched %d times after its create; its status alone is left to write", writes.patches)
	}
	have := &v1alpha2.EtcdMember{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(sent), have); err != nil {
		t.Fatal(err)
	}
	if !have.Status.IsVoter {
		t.Error("the seed is not recorded as a voter")
	}
}

// See TestSeedIsCreatedStartable.
func TestJoinerIsCreatedStartable(t *testing.T) {
	r, _, writes := actReconciler(t)
	w := healthyWorld(1)
	w.etcd.list.Members = []etcd.Member{{ID: 0x10, Name: "m0", PeerURLs: []string{manifest.PeerURL(w.members[0])}}}
	if o := r.act(context.Background(), w, &change{kind: createJoiner}); o.err != nil {
		t.Fatal(o.err)
	}
	if len(writes.created) != 1 {
		t.Fatalf("created %d members, want one joiner", len(writes.created))
	}
	sent := writes.created[0]
	join := sent.Annotations[manifest.AnnotationJoinCluster]
	for _, want := range []string{"m0=" + manifest.PeerURL(w.members[0]), sent.Name + "=" + manifest.PeerURL(sent)} {
		if !strings.Contains(join, want) {
			t.Errorf("joiner created with join cluster %q, which lacks %q", join, want)
		}
	}
	if sent.Spec.InitialCluster != "" || sent.Spec.Bootstrap {
		t.Errorf("joiner created with initialCluster %q (bootstrap %v): etcd does not know it yet", sent.Spec.InitialCluster, sent.Spec.Bootstrap)
	}
	if !controllerutil.ContainsFinalizer(sent, manifest.MemberFinalizer) {
		t.Errorf("joiner created without the finalizer: %v", sent.Finalizers)
	}
	if writes.patches != 0 {
		t.Errorf("the joiner was patched %d times after its create", writes.patches)
	}
}

// Member names look like the API server's generated names and are always a
// DNS label, whatever the cluster's name.
func TestMemberName(t *testing.T) {
	for _, cluster := range []string{"c", strings.Repeat("x", 57), strings.Repeat("y", 58), strings.Repeat("z", 253)} {
		name := manifest.MemberName(cluster)
		base := cluster + "-"
		if len(base) > 58 {
			base = base[:58]
		}
		if len(name) > 63 || !strings.HasPrefix(name, base) || len(name) != len(base)+5 {
			t.Errorf("MemberName(%d characters) = %q (%d characters)", len(cluster), name, len(name))
		}
	}
	if a, b := manifest.MemberName("c"), manifest.MemberName("c"); a == b {
		t.Errorf("two draws gave the same name %q", a)
	}
}

// Every change has a name for the pass log.
func TestChangeKindNames(t *testing.T) {
	for k := latchStatus; k <= discard; k++ {
		if name := k.String(); strings.HasPrefix(name, "change(") {
			t.Errorf("change kind %d has no name", int(k))
		}
	}
}

// A roll-out's end is an outcome like its restarts: the plan chooses it
// once the last member restarted is settled, and the action returns the
// record with its completion time, leaving the world as it was.
func TestRollOutEndIsAnOutcome(t *testing.T) {
	r, _, _ := actReconciler(t)
	w := healthyWorld(3, func(w *world) {
		w.cluster.Status.LastRollOut = &v1alpha2.RollOutStatus{Cause: v1alpha2.RollOutCauseSpec, StartTime: metav1.NewTime(t0.Add(-time.Hour)),
			Restarted: []string{"m0", "m1", "m2"}}
		w.original = w.cluster.DeepCopy()
	})
	p := decide(w)
	if p.change == nil || p.change.kind != completeRollOut {
		t.Fatalf("a finished roll-out is not completed: %+v", p.change)
	}
	o := r.act(context.Background(), w, p.change)
	if o.err != nil || o.learned.rollOut == nil || o.learned.rollOut.CompletionTime == nil || len(o.learned.rollOut.Restarted) != 3 {
		t.Fatalf("outcome: %+v", o)
	}
	if w.cluster.Status.LastRollOut.CompletionTime != nil {
		t.Fatal("the action wrote the world's status")
	}
	if next := w.after(o.learned); next.cluster.Status.LastRollOut.CompletionTime == nil || decide(next).change != nil {
		t.Errorf("after the outcome the plan still has work: %+v", decide(next).change)
	}
}

// etcd's cluster version read this pass is what the planner sees and what
// report records; the world's status keeps the recorded one until then.
func TestClusterVersionIsRecordedByReport(t *testing.T) {
	w := healthyWorld(3, func(w *world) {
		w.cluster.Status.ClusterVersion = "3.5"
		w.original = w.cluster.DeepCopy()
		w.etcd.clusterVersion = "3.6"
	})
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&v1alpha2.EtcdCluster{}).WithObjects(w.original.DeepCopy()).Build()
	r := &Reconciler{Client: c, APIReader: c, Recorder: &fakeEvents{}, Clock: clocktesting.NewFakeClock(t0)}
	if w.clusterVersion() != "3.6" || w.cluster.Status.ClusterVersion != "3.5" {
		t.Fatalf("clusterVersion() = %q, status %q", w.clusterVersion(), w.cluster.Status.ClusterVersion)
	}
	if err := r.report(context.Background(), w, decide(w), outcome{}); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha2.EtcdCluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(w.cluster), got); err != nil || got.Status.ClusterVersion != "3.6" {
		t.Errorf("report recorded %q (%v)", got.Status.ClusterVersion, err)
	}
}
