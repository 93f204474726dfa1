package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

var beforeToS3 = v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3", Bucket: "b", Key: "before"}}

// guarded is a healthy cluster of three whose snapshotBefore guards every
// change, and whose spec asks for mod's change.
func guarded(mod func(*v1alpha2.EtcdClusterSpec)) *world {
	return healthyWorld(3, func(w *world) {
		w.cluster.Spec.SnapshotBefore = &v1alpha2.SnapshotBeforeSpec{
			Changes:     []v1alpha2.SnapshotBeforeChange{v1alpha2.SnapshotBeforeVersionChange, v1alpha2.SnapshotBeforeScaleIn, v1alpha2.SnapshotBeforePause},
			Destination: &beforeToS3,
		}
		mod(&w.cluster.Spec)
	})
}

func scaleTo(n int32) func(*v1alpha2.EtcdClusterSpec) {
	return func(s *v1alpha2.EtcdClusterSpec) { s.Replicas = ptr.To(n) }
}

func versionTo(v string) func(*v1alpha2.EtcdClusterSpec) {
	return func(s *v1alpha2.EtcdClusterSpec) { s.Version = v }
}

func withBefore(phase v1alpha2.SnapshotPhase) func(*world) {
	return func(w *world) {
		s := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Name: snapshotBeforeName(w), Namespace: "ns"}}
		s.Status.Phase = phase
		if phase == v1alpha2.SnapshotFailed {
			s.Status.Conditions = []metav1.Condition{{Type: conditions.Ready, Status: metav1.ConditionFalse, Reason: "BucketNotFound", Message: "no bucket b"}}
		}
		w.before.snapshot = s
	}
}

// A version change, a scale-in and a pause that snapshotBefore guards are
// not adopted until their snapshot is Complete: the first pass takes it,
// the next ones wait for it, a failure holds the change and says how to go
// on, and a Complete one lets the change be latched. A change it does not
// guard (a scale-out), and a guarded one of a paused cluster (nothing runs
// to snapshot), go ahead at once.
func TestSnapshotBeforeHoldsTheChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   func(*v1alpha2.EtcdClusterSpec)
		what   string
		guards bool
	}{
		{"version change", versionTo("3.7.0"), "version change", true},
		{"scale-in", scaleTo(1), "scale-in", true},
		{"pause", scaleTo(0), "pause", true},
		{"version change and scale-in", func(s *v1alpha2.EtcdClusterSpec) { versionTo("3.7.0")(s); scaleTo(1)(s) }, "version change and scale-in", true},
		{"scale-out", scaleTo(5), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.guards {
				if p := decide(guarded(tc.spec)); p.change == nil || p.change.kind != latchStatus {
					t.Fatalf("an unguarded change: plan %+v, want the latch", p.change)
				}
				return
			}
			heldUntilComplete(t, tc.spec, tc.what)
		})
	}
	t.Run("paused cluster", func(t *testing.T) {
		w := guarded(versionTo("3.7.0"))
		w.cluster.Status.Observed.Replicas = 0
		*w.cluster.Spec.Replicas = 0
		for _, m := range w.members {
			m.Spec.Dormant = true
		}
		if p := decide(w); p.change != nil && p.change.kind == takeSnapshot {
			t.Errorf("a paused cluster's version change takes a snapshot of nothing")
		}
	})
}

// heldUntilComplete takes the change's snapshot first, waits for it while
// it runs, holds the change when it failed, and latches the change once it
// is Complete.
func heldUntilComplete(t *testing.T, spec func(*v1alpha2.EtcdClusterSpec), what string) {
	t.Helper()
	w := guarded(spec)
	p := decide(w)
	if p.change == nil || p.change.kind != takeSnapshot || p.change.snapshot.Name != snapshotBeforeName(w) ||
		p.change.snapshot.Spec.ClusterRef.Name != "c" || p.change.snapshot.Spec.Destination.S3 == nil ||
		p.change.snapshot.Annotations[manifest.AnnotationSnapshotBefore] != what {
		t.Fatalf("first pass: %+v, want the snapshot taken before the %s", p.change, what)
	}
	checkProgress(t, w, p, true, conditions.ReasonTakingSnapshotBefore, "Taking snapshot")
	for _, phase := range []v1alpha2.SnapshotPhase{"", v1alpha2.SnapshotPending, v1alpha2.SnapshotStarted} {
		w := guarded(spec)
		withBefore(phase)(w)
		p := decide(w)
		if p.change != nil {
			t.Errorf("snapshot %q: plan %v, want the change to wait", phase, p.change.kind)
		}
		checkProgress(t, w, p, true, conditions.ReasonTakingSnapshotBefore, "Waiting for snapshot")
	}
	w = guarded(spec)
	withBefore(v1alpha2.SnapshotFailed)(w)
	p = decide(w)
	if p.change != nil {
		t.Errorf("failed snapshot: plan %v, want the change held", p.change.kind)
	}
	checkProgress(t, w, p, false, conditions.ReasonSnapshotBeforeFailed, "no bucket b); the change waits: delete the snapshot")
	w = guarded(spec)
	withBefore(v1alpha2.SnapshotComplete)(w)
	p = decide(w)
	if p.change == nil || p.change.kind != latchStatus || !equality.Semantic.DeepEqual(p.change.status.Observed, manifest.Observe(&w.cluster.Spec)) {
		t.Errorf("complete snapshot: plan %+v, want the new target latched", p.change)
	}
}

func checkProgress(t *testing.T, w *world, p plan, status bool, reason, message string) {
	t.Helper()
	setProgressing(w, p)
	c := conditions.Get(w.cluster.Status.Conditions, conditions.Progressing)
	want := metav1.ConditionFalse
	if status {
		want = metav1.ConditionTrue
	}
	if c == nil || c.Status != want || c.Reason != reason || !strings.Contains(c.Message, message) {
		t.Errorf("Progressing = %+v, want %s %s %q", c, want, reason, message)
	}
}

// The snapshot is named after the change, so a pass after a restart finds
// the one taken; another change gets another snapshot. Made from a
// schedule, it is that schedule's (its retention keeps or deletes it); a
// schedule that does not exist, or snapshots another cluster, holds the
// change and says so.
func TestSnapshotBeforeFromASchedule(t *testing.T) {
	a, b := guarded(versionTo("3.7.0")), guarded(versionTo("3.7.0"))
	if snapshotBeforeName(a) != snapshotBeforeName(b) || !strings.HasPrefix(snapshotBeforeName(a), "c-before-") {
		t.Errorf("the same change is named %s and %s", snapshotBeforeName(a), snapshotBeforeName(b))
	}
	if other := guarded(scaleTo(1)); snapshotBeforeName(other) == snapshotBeforeName(a) {
		t.Error("another change has the same snapshot name")
	}

	sched := &v1alpha2.EtcdSnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "sched-uid"}}
	sched.Spec.SnapshotTemplate.Metadata = &v1alpha2.TemplateMetadata{Labels: map[string]string{"team": "x"}}
	sched.Spec.SnapshotTemplate.Spec = v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "c"}, Destination: beforeToS3, Verify: true}
	fromSchedule := func(s *v1alpha2.EtcdSnapshotSchedule) *world {
		w := guarded(versionTo("3.7.0"))
		w.cluster.Spec.SnapshotBefore.Destination = nil
		w.cluster.Spec.SnapshotBefore.ScheduleRef = &corev1.LocalObjectReference{Name: "nightly"}
		w.before.schedule = s
		return w
	}
	w := fromSchedule(sched)
	p := decide(w)
	if p.change == nil || p.change.kind != takeSnapshot {
		t.Fatalf("plan %+v, want the snapshot", p.change)
	}
	s := p.change.snapshot
	ref := metav1.GetControllerOf(s)
	if ref == nil || ref.UID != "sched-uid" || s.Labels[manifest.LabelSchedule] != "nightly" || s.Labels["team"] != "x" || !s.Spec.Verify {
		t.Errorf("snapshot from the schedule: %+v", s.ObjectMeta)
	}

	if p := decide(fromSchedule(nil)); p.change != nil || !strings.Contains(p.snapshotBeforeFailed, "does not exist") {
		t.Errorf("no schedule: plan %v, %q", p.change, p.snapshotBeforeFailed)
	}
	theirs := sched.DeepCopy()
	theirs.Spec.SnapshotTemplate.Spec.ClusterRef.Name = "other"
	if p := decide(fromSchedule(theirs)); p.change != nil || !strings.Contains(p.snapshotBeforeFailed, "snapshots cluster other") {
		t.Errorf("another cluster's schedule: plan %v, %q", p.change, p.snapshotBeforeFailed)
	}
}

// The snapshot is created once: an operator stopped after creating it and
// before seeing it in its cache creates it again, which finds it there.
func TestTakeSnapshotIsCreatedOnce(t *testing.T) {
	w := guarded(versionTo("3.7.0"))
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(w.cluster).Build()
	r := &Reconciler{Client: c, APIReader: c, Recorder: &fakeEvents{}}
	for range 2 {
		if o := r.act(context.Background(), w, decide(w).change); o.err != nil {
			t.Fatal(o.err)
		}
	}
	got := &v1alpha2.EtcdSnapshot{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: snapshotBeforeName(w)}, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[manifest.LabelCluster] != "c" || got.Spec.Destination.S3.Key != "before" {
		t.Errorf("snapshot %+v", got)
	}
}
