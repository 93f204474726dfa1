package schedule

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

type fixture struct {
	t     *testing.T
	c     client.Client
	r     *Reconciler
	clock *clocktesting.FakeClock
}

var created = at("2026-12-01T10:00:30Z")

func schedule(mods ...func(*v1alpha2.EtcdSnapshotSchedule)) *v1alpha2.EtcdSnapshotSchedule {
	s := &v1alpha2.EtcdSnapshotSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "sched-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha2.EtcdSnapshotScheduleSpec{
			Schedule: "* * * * *",
			SnapshotTemplate: v1alpha2.EtcdSnapshotTemplate{
				Metadata: &v1alpha2.TemplateMetadata{Labels: map[string]string{"team": "a"}},
				Spec: v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "db"},
					Destination: v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups"}}},
			},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha2.EtcdSnapshotSchedule{}, &v1alpha2.EtcdSnapshot{}).Build()
	f := &fixture{t: t, c: c, clock: clocktesting.NewFakeClock(created)}
	f.r = &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), Clock: f.clock}
	return f
}

func (f *fixture) reconcileAt(when string) ctrl.Result {
	f.t.Helper()
	f.clock.SetTime(at(when))
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "nightly"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) snapshots() []v1alpha2.EtcdSnapshot {
	f.t.Helper()
	list := &v1alpha2.EtcdSnapshotList{}
	if err := f.c.List(context.Background(), list); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) schedule() *v1alpha2.EtcdSnapshotSchedule {
	f.t.Helper()
	s := &v1alpha2.EtcdSnapshotSchedule{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nightly"}, s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// finishAll marks every snapshot as finished.
func (f *fixture) finishAll(phase v1alpha2.SnapshotPhase) {
	f.t.Helper()
	for _, s := range f.snapshots() {
		if s.Status.Phase != "" {
			continue
		}
		s.Status.Phase = phase
		s.Status.CompletionTime = &metav1.Time{Time: f.clock.Now()}
		if err := f.c.Status().Update(context.Background(), &s); err != nil {
			f.t.Fatal(err)
		}
	}
}

// verifyAll ends the verification of every snapshot that asked for one.
func (f *fixture) verifyAll() {
	f.t.Helper()
	for _, s := range f.snapshots() {
		if !s.Spec.Verify || conditions.Get(s.Status.Conditions, conditions.Verified) != nil {
			continue
		}
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: conditions.Verified, Status: metav1.ConditionTrue,
			Reason: conditions.ReasonVerificationPassed, Message: "verified", LastTransitionTime: metav1.NewTime(f.clock.Now())})
		if err := f.c.Status().Update(context.Background(), &s); err != nil {
			f.t.Fatal(err)
		}
	}
}

func names(ss []v1alpha2.EtcdSnapshot) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

func TestOneSnapshotPerSlot(t *testing.T) {
	f := newFixture(t, schedule())
	res := f.reconcileAt("2026-12-01T10:00:45Z")
	if len(f.snapshots()) != 0 || res.RequeueAfter != 16*time.Second {
		t.Fatalf("before the first slot: %v, back after %s", names(f.snapshots()), res.RequeueAfter)
	}
	f.reconcileAt("2026-12-01T10:01:01Z")
	ss := f.snapshots()
	want := SnapshotName("nightly", at("2026-12-01T10:01:00Z"))
	if len(ss) != 1 || ss[0].Name != want {
		t.Fatalf("snapshots %v, want [%s]", names(ss), want)
	}
	s := ss[0]
	if ref := metav1.GetControllerOf(&s); ref == nil || ref.UID != "sched-uid" || s.Labels[manifest.LabelSchedule] != "nightly" ||
		s.Labels["team"] != "a" || s.Annotations[manifest.AnnotationScheduledAt] != "2026-12-01T10:01:00Z" || s.Spec.Destination.PVC == nil {
		t.Errorf("snapshot %+v", s.ObjectMeta)
	}
	st := f.schedule().Status
	if !st.LastScheduleTime.Time.Equal(at("2026-12-01T10:01:00Z")) || !st.NextScheduleTime.Time.Equal(at("2026-12-01T10:02:00Z")) ||
		len(st.Active) != 1 || st.LastSnapshot != want {
		t.Errorf("status %+v", st)
	}
	// The same slot again (a restart that lost the status write would
	// compute it again): nothing new.
	f.reconcileAt("2026-12-01T10:01:30Z")
	if n := len(f.snapshots()); n != 1 {
		t.Errorf("%d snapshots after a second pass in the same slot", n)
	}
}

// After downtime only the latest missed slot runs, once.
func TestMissedSlotsRunOnce(t *testing.T) {
	f := newFixture(t, schedule())
	f.reconcileAt("2026-12-01T10:01:01Z")
	f.finishAll(v1alpha2.SnapshotComplete)
	// The operator was away from 10:01:30 to 10:05:20.
	f.reconcileAt("2026-12-01T10:05:20Z")
	f.reconcileAt("2026-12-01T10:05:21Z")
	got := names(f.snapshots())
	want := []string{SnapshotName("nightly", at("2026-12-01T10:01:00Z")), SnapshotName("nightly", at("2026-12-01T10:05:00Z"))}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("snapshots %v, want %v", got, want)
	}
}

// A slot is not started while the previous snapshot runs; it runs when
// that one finishes.
func TestOneSnapshotAtATime(t *testing.T) {
	f := newFixture(t, schedule())
	f.reconcileAt("2026-12-01T10:01:01Z")
	f.reconcileAt("2026-12-01T10:02:05Z")
	if n := len(f.snapshots()); n != 1 {
		t.Fatalf("%d snapshots while the first runs", n)
	}
	f.finishAll(v1alpha2.SnapshotComplete)
	f.reconcileAt("2026-12-01T10:02:30Z")
	if n := len(f.snapshots()); n != 2 {
		t.Errorf("%d snapshots once the first finished, want 2", n)
	}
}

func TestStartingDeadlineSkipsLateRuns(t *testing.T) {
	f := newFixture(t, schedule(func(s *v1alpha2.EtcdSnapshotSchedule) { s.Spec.StartingDeadlineSeconds = ptr.To[int64](20) }))
	f.reconcileAt("2026-12-01T10:01:40Z")
	if n := len(f.snapshots()); n != 0 {
		t.Errorf("a run 40 s late was made despite a 20 s deadline")
	}
	if c := conditions.Get(f.schedule().Status.Conditions, conditions.Ready); c == nil || c.Reason != conditions.ReasonMissedSchedule {
		t.Errorf("Ready %+v", c)
	}
	f.reconcileAt("2026-12-01T10:02:10Z")
	if n := len(f.snapshots()); n != 1 {
		t.Errorf("the next slot did not run")
	}
}

func TestSuspendedAndInvalidSchedules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(*v1alpha2.EtcdSnapshotSchedule)
		status metav1.ConditionStatus
		reason string
	}{
		{"suspended", func(s *v1alpha2.EtcdSnapshotSchedule) { s.Spec.Suspend = true }, metav1.ConditionTrue, conditions.ReasonSuspended},
		{"bad schedule", func(s *v1alpha2.EtcdSnapshotSchedule) { s.Spec.Schedule = "61 * * * *" }, metav1.ConditionFalse, conditions.ReasonInvalidSchedule},
		{"bad time zone", func(s *v1alpha2.EtcdSnapshotSchedule) { s.Spec.TimeZone = ptr.To("Mars/Olympus") }, metav1.ConditionFalse, conditions.ReasonInvalidTimeZone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, schedule(tc.mod))
			f.reconcileAt("2026-12-01T10:05:00Z")
			st := f.schedule().Status
			c := conditions.Get(st.Conditions, conditions.Ready)
			if len(f.snapshots()) != 0 || st.NextScheduleTime != nil || c == nil || c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("snapshots %v next %v Ready %+v", names(f.snapshots()), st.NextScheduleTime, c)
			}
		})
	}
}

func TestTimeZone(t *testing.T) {
	f := newFixture(t, schedule(func(s *v1alpha2.EtcdSnapshotSchedule) {
		s.Spec.Schedule = "0 2 * * *"
		s.Spec.TimeZone = ptr.To("Europe/Berlin")
	}))
	f.reconcileAt("2026-12-01T10:05:00Z")
	// 02:00 in Berlin in December is 01:00 UTC.
	if next := f.schedule().Status.NextScheduleTime; next == nil || !next.Time.Equal(at("2026-12-02T01:00:00Z")) {
		t.Errorf("next %v, want 2026-12-02T01:00:00Z", next)
	}
}

// History: Complete objects beyond the limit and the retention go, the
// newest stays; Failed beyond theirs.
func TestHistoryLimits(t *testing.T) {
	var objs []client.Object
	sched := schedule(func(s *v1alpha2.EtcdSnapshotSchedule) {
		s.Spec.SuccessfulSnapshotsHistoryLimit = ptr.To[int32](3)
		s.Spec.FailedSnapshotsHistoryLimit = ptr.To[int32](1)
		s.Spec.Retention = &v1alpha2.SnapshotRetention{KeepLast: ptr.To[int32](2)}
		s.Spec.Suspend = true
	})
	objs = append(objs, sched)
	for i, phase := range []v1alpha2.SnapshotPhase{"Complete", "Failed", "Complete", "Failed", "Complete", "Failed", "Complete"} {
		slot := created.Add(time.Duration(i+1) * time.Minute).Truncate(time.Minute)
		s := &v1alpha2.EtcdSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: SnapshotName("nightly", slot), Namespace: "ns",
				Labels:          map[string]string{manifest.LabelSchedule: "nightly"},
				Annotations:     map[string]string{manifest.AnnotationScheduledAt: slot.Format(time.RFC3339)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sched, v1alpha2.GroupVersion.WithKind("EtcdSnapshotSchedule"))}},
			Status: v1alpha2.EtcdSnapshotStatus{Phase: phase, CompletionTime: &metav1.Time{Time: slot}},
		}
		if i == 6 {
			s.Status.Retention = &v1alpha2.RetentionResult{PrunedCount: 1, Pruned: []string{"s3://b/x.db"}}
		}
		objs = append(objs, s)
	}
	// One of another schedule: never touched.
	objs = append(objs, &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns",
		Labels: map[string]string{manifest.LabelSchedule: "nightly"}}, Status: v1alpha2.EtcdSnapshotStatus{Phase: "Complete"}})
	f := newFixture(t, objs...)
	f.reconcileAt("2026-12-01T11:00:00Z")
	var kept []string
	for _, s := range f.snapshots() {
		kept = append(kept, s.Annotations[manifest.AnnotationScheduledAt]+" "+string(s.Status.Phase))
	}
	slices.Sort(kept)
	want := []string{" Complete", "2026-12-01T10:05:00Z Complete", "2026-12-01T10:06:00Z Failed", "2026-12-01T10:07:00Z Complete"}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	st := f.schedule().Status
	if c := conditions.Get(st.Conditions, conditions.RetentionApplied); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "s3://b/x.db") {
		t.Errorf("RetentionApplied %+v", c)
	}
	if st.LastSuccessfulTime == nil || !st.LastSuccessfulTime.Time.Equal(at("2026-12-01T10:07:00Z")) {
		t.Errorf("last success %v", st.LastSuccessfulTime)
	}
}

// verifyEvery picks the first snapshot and every Nth after it.
func TestVerifyEveryNthSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		verify bool
		every  *int32
		want   []bool
	}{
		{"not asked", false, nil, []bool{false, false, false, false}},
		{"every one", true, nil, []bool{true, true, true, true}},
		{"every third", true, ptr.To[int32](3), []bool{true, false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, schedule(func(s *v1alpha2.EtcdSnapshotSchedule) {
				s.Spec.SnapshotTemplate.Spec.Verify = tc.verify
				s.Spec.VerifyEvery = tc.every
			}))
			var got []bool
			for minute := 1; minute <= len(tc.want); minute++ {
				slot := created.Truncate(time.Minute).Add(time.Duration(minute) * time.Minute)
				f.reconcileAt(slot.Add(time.Second).Format(time.RFC3339))
				f.reconcileAt(slot.Add(2 * time.Second).Format(time.RFC3339))
				s := &v1alpha2.EtcdSnapshot{}
				if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: SnapshotName("nightly", slot)}, s); err != nil {
					t.Fatal(err)
				}
				got = append(got, s.Spec.Verify)
				f.finishAll(v1alpha2.SnapshotComplete)
				f.verifyAll()
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("verified %v, want %v", got, tc.want)
			}
			if n := f.schedule().Status.SnapshotsMade; n != int64(len(tc.want)) {
				t.Errorf("snapshotsMade %d, want %d", n, len(tc.want))
			}
		})
	}
}

// A snapshot being verified still runs: the next slot waits for it, and the
// history limit does not delete it; once verified it is finished.
func TestVerificationHoldsTheNextSlot(t *testing.T) {
	f := newFixture(t, schedule(func(s *v1alpha2.EtcdSnapshotSchedule) {
		s.Spec.SnapshotTemplate.Spec.Verify = true
		s.Spec.SuccessfulSnapshotsHistoryLimit = ptr.To[int32](0)
	}))
	f.reconcileAt("2026-12-01T10:01:01Z")
	f.finishAll(v1alpha2.SnapshotComplete)
	f.reconcileAt("2026-12-01T10:02:05Z")
	if got := names(f.snapshots()); len(got) != 1 {
		t.Fatalf("snapshots %v while the first is verified", got)
	}
	if st := f.schedule().Status; len(st.Active) != 1 {
		t.Errorf("active %v", st.Active)
	}
	f.verifyAll()
	f.reconcileAt("2026-12-01T10:02:30Z")
	got := names(f.snapshots())
	want := SnapshotName("nightly", at("2026-12-01T10:02:00Z"))
	if len(got) != 1 || got[0] != want {
		t.Errorf("snapshots %v, want only %s (the verified one trimmed by the limit of 0, the held slot made)", got, want)
	}
}
