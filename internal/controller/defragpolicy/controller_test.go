package defragpolicy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

var created = at("2026-12-01T10:00:30Z")

func policy(mods ...func(*v1alpha2.EtcdDefragPolicy)) *v1alpha2.EtcdDefragPolicy {
	p := &v1alpha2.EtcdDefragPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "policy-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha2.EtcdDefragPolicySpec{
			ClusterRef:              corev1.LocalObjectReference{Name: "db"},
			Schedule:                "* * * * *",
			Rule:                    &v1alpha2.DefragRule{FreeSpaceAbove: ptr.To(resource.MustParse("200Mi"))},
			TTLSecondsAfterFinished: ptr.To[int32](3600),
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

type fixture struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
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
		WithStatusSubresource(&v1alpha2.EtcdDefragPolicy{}, &v1alpha2.EtcdDefrag{}).Build()
	f := &fixture{t: t, c: c, clock: clocktesting.NewFakeClock(created), events: events.NewFakeRecorder(100)}
	f.r = &Reconciler{Client: c, Recorder: f.events, Clock: f.clock}
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

func (f *fixture) runs() []v1alpha2.EtcdDefrag {
	f.t.Helper()
	list := &v1alpha2.EtcdDefragList{}
	if err := f.c.List(context.Background(), list); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) policy() *v1alpha2.EtcdDefragPolicy {
	f.t.Helper()
	p := &v1alpha2.EtcdDefragPolicy{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nightly"}, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) update(mod func(*v1alpha2.EtcdDefragPolicy)) {
	f.t.Helper()
	p := f.policy()
	mod(p)
	if err := f.c.Update(context.Background(), p); err != nil {
		f.t.Fatal(err)
	}
}

// finishAll ends every unfinished run in phase, now.
func (f *fixture) finishAll(phase v1alpha2.DefragPhase) {
	f.t.Helper()
	for _, d := range f.runs() {
		if d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed {
			continue
		}
		d.Status.Phase = phase
		d.Status.CompletedAt = &metav1.Time{Time: f.clock.Now()}
		if err := f.c.Status().Update(context.Background(), &d); err != nil {
			f.t.Fatal(err)
		}
	}
}

// drainEvents returns the Events recorded since the last call.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

func names(ds []v1alpha2.EtcdDefrag) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	slices.Sort(out)
	return out
}

func runName(tick string) string { return manifest.DefragRunName("nightly", at(tick)) }

func active(f *fixture) *metav1.Condition {
	return conditions.Get(f.policy().Status.Conditions, conditions.Active)
}

// A policy fires at two ticks, each run built from the policy, and keeps
// only historyLimit finished runs.
func TestFiresTwiceAndKeepsHistory(t *testing.T) {
	f := newFixture(t, policy(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.HistoryLimit = ptr.To[int32](1) }))
	res := f.reconcileAt("2026-12-01T10:00:45Z")
	if len(f.runs()) != 0 || res.RequeueAfter != 16*time.Second {
		t.Fatalf("before the first tick: %v, back after %s", names(f.runs()), res.RequeueAfter)
	}
	if c := active(f); c == nil || c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonScheduled {
		t.Errorf("Active %+v", c)
	}

	f.reconcileAt("2026-12-01T10:01:01Z")
	first := runName("2026-12-01T10:01:00Z")
	if got := names(f.runs()); !slices.Equal(got, []string{first}) {
		t.Fatalf("runs %v, want [%s]", got, first)
	}
	d := f.runs()[0]
	if first != "nightly-1796119260" {
		t.Errorf("run name %s, want <policy>-<unix seconds of the tick>", first)
	}
	ref := metav1.GetControllerOf(&d)
	if ref == nil || ref.UID != "policy-uid" || ref.Kind != "EtcdDefragPolicy" ||
		d.Labels[manifest.LabelDefragPolicy] != "nightly" || d.Labels[manifest.LabelCluster] != "db" {
		t.Errorf("run metadata %+v", d.ObjectMeta)
	}
	if d.Spec.ClusterRef.Name != "db" || d.Spec.Rule == nil || d.Spec.Rule.FreeSpaceAbove.String() != "200Mi" ||
		ptr.Deref(d.Spec.TTLSecondsAfterFinished, 0) != 3600 {
		t.Errorf("run spec %+v", d.Spec)
	}
	st := f.policy().Status
	if !st.LastScheduleTime.Time.Equal(at("2026-12-01T10:01:00Z")) || !st.NextScheduleTime.Time.Equal(at("2026-12-01T10:02:00Z")) ||
		len(st.Active) != 1 || st.Active[0].Name != first {
		t.Errorf("status %+v", st)
	}
	if ev := f.drainEvents(); !hasEvent(ev, "Normal StampedRun") {
		t.Errorf("events %v, want StampedRun", ev)
	}
	// The same tick again (as after a lost status write): nothing new.
	f.reconcileAt("2026-12-01T10:01:30Z")
	if n := len(f.runs()); n != 1 {
		t.Errorf("%d runs after a second pass in the same tick", n)
	}

	f.finishAll(v1alpha2.DefragComplete)
	f.reconcileAt("2026-12-01T10:02:01Z")
	second := runName("2026-12-01T10:02:00Z")
	if got := names(f.runs()); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("runs %v, want [%s %s]", got, first, second)
	}
	f.clock.SetTime(at("2026-12-01T10:02:40Z"))
	f.finishAll(v1alpha2.DefragFailed)
	f.reconcileAt("2026-12-01T10:02:50Z")
	if got := names(f.runs()); !slices.Equal(got, []string{second}) {
		t.Errorf("runs %v after both finished, want only the newest %s", got, second)
	}
	st = f.policy().Status
	if len(st.Active) != 0 || st.LastSuccessfulTime == nil || !st.LastSuccessfulTime.Time.Equal(at("2026-12-01T10:01:30Z")) {
		t.Errorf("status %+v: want no active run and the first run's completion as the last success", st)
	}
}

// historyLimit 0 deletes every finished run; runs not controlled by the
// policy are neither counted nor deleted; unfinished ones stay.
func TestHistoryLimitZeroAndForeignRuns(t *testing.T) {
	pol := policy(func(p *v1alpha2.EtcdDefragPolicy) {
		p.Spec.HistoryLimit = ptr.To[int32](0)
		p.Spec.Suspend = ptr.To(true)
	})
	own := *metav1.NewControllerRef(pol, v1alpha2.GroupVersion.WithKind("EtcdDefragPolicy"))
	run := func(name string, phase v1alpha2.DefragPhase, owners ...metav1.OwnerReference) client.Object {
		return &v1alpha2.EtcdDefrag{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{manifest.LabelDefragPolicy: "nightly"}, OwnerReferences: owners},
			Spec:       v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: "db"}},
			Status:     v1alpha2.EtcdDefragStatus{Phase: phase},
		}
	}
	f := newFixture(t, pol, run("done", v1alpha2.DefragComplete, own), run("failed", v1alpha2.DefragFailed, own),
		run("running", v1alpha2.DefragRunning, own), run("hand-made", v1alpha2.DefragComplete))
	f.reconcileAt("2026-12-01T10:05:00Z")
	if got := names(f.runs()); !slices.Equal(got, []string{"hand-made", "running"}) {
		t.Errorf("runs %v, want [hand-made running]", got)
	}
	if st := f.policy().Status; len(st.Active) != 1 || st.Active[0].Name != "running" {
		t.Errorf("active %v", st.Active)
	}
}

func TestSuspend(t *testing.T) {
	f := newFixture(t, policy(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.Suspend = ptr.To(true) }))
	res := f.reconcileAt("2026-12-01T10:05:00Z")
	st := f.policy().Status
	c := active(f)
	if len(f.runs()) != 0 || res.RequeueAfter != 0 || st.NextScheduleTime != nil || st.LastScheduleTime != nil ||
		c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonSuspended {
		t.Fatalf("suspended: runs %v, back after %s, status %+v", names(f.runs()), res.RequeueAfter, st)
	}
	// Resumed: one run for the latest missed tick, not one per tick.
	f.update(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.Suspend = ptr.To(false) })
	f.reconcileAt("2026-12-01T10:05:10Z")
	if got := names(f.runs()); !slices.Equal(got, []string{runName("2026-12-01T10:05:00Z")}) {
		t.Errorf("runs after resuming %v, want one for 10:05", got)
	}
	if c := active(f); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Active after resuming %+v", c)
	}
}

func TestConcurrencyPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy v1alpha2.DefragConcurrencyPolicy
		want   []string
		event  string
	}{
		{"unset is Forbid", "", []string{"2026-12-01T10:01:00Z", "2026-12-01T10:03:00Z"}, "Normal ConcurrencyForbidden"},
		{"Forbid", v1alpha2.DefragConcurrencyForbid, []string{"2026-12-01T10:01:00Z", "2026-12-01T10:03:00Z"}, "Normal ConcurrencyForbidden"},
		{"Allow", v1alpha2.DefragConcurrencyAllow, []string{"2026-12-01T10:01:00Z", "2026-12-01T10:02:00Z", "2026-12-01T10:03:00Z"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, policy(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.ConcurrencyPolicy = tc.policy }))
			f.reconcileAt("2026-12-01T10:01:01Z")
			f.drainEvents()
			// The 10:01 run still runs at the 10:02 tick.
			f.reconcileAt("2026-12-01T10:02:01Z")
			ev := f.drainEvents()
			if tc.event != "" && !hasEvent(ev, tc.event) {
				t.Errorf("events %v, want %s", ev, tc.event)
			}
			if last := f.policy().Status.LastScheduleTime; last == nil || !last.Time.Equal(at("2026-12-01T10:02:00Z")) {
				t.Errorf("lastScheduleTime %v: the 10:02 tick is used up either way", last)
			}
			// Finished before the next tick: the skipped tick is not made up for.
			f.finishAll(v1alpha2.DefragComplete)
			f.reconcileAt("2026-12-01T10:02:30Z")
			f.reconcileAt("2026-12-01T10:03:01Z")
			var want []string
			for _, tick := range tc.want {
				want = append(want, runName(tick))
			}
			slices.Sort(want)
			if got := names(f.runs()); !slices.Equal(got, want) {
				t.Errorf("runs %v, want %v", got, want)
			}
		})
	}
}

func TestStartingDeadline(t *testing.T) {
	f := newFixture(t, policy(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.StartingDeadlineSeconds = ptr.To[int64](20) }))
	f.reconcileAt("2026-12-01T10:01:40Z")
	if n := len(f.runs()); n != 0 {
		t.Errorf("a run 40 s late was made despite a 20 s deadline")
	}
	if ev := f.drainEvents(); !hasEvent(ev, "Warning MissedSchedule") {
		t.Errorf("events %v, want MissedSchedule", ev)
	}
	if last := f.policy().Status.LastScheduleTime; last == nil || !last.Time.Equal(at("2026-12-01T10:01:00Z")) {
		t.Errorf("lastScheduleTime %v: the missed tick is used up", last)
	}
	// Within the deadline (exactly at it counts as within).
	f.reconcileAt("2026-12-01T10:02:20Z")
	if got := names(f.runs()); !slices.Equal(got, []string{runName("2026-12-01T10:02:00Z")}) {
		t.Errorf("runs %v, want the 10:02 run", got)
	}
}

// A backlog of more than 100 ticks is one run for now; of 100, one run for
// the latest tick.
func TestLongBacklog(t *testing.T) {
	f := newFixture(t, policy())
	f.reconcileAt("2026-12-01T11:40:05Z") // ticks 10:01 .. 11:40: 100
	if got := names(f.runs()); !slices.Equal(got, []string{runName("2026-12-01T11:40:00Z")}) {
		t.Errorf("runs %v, want the 11:40 run", got)
	}
	g := newFixture(t, policy())
	g.reconcileAt("2026-12-01T11:41:05Z") // 101 ticks
	if got := names(g.runs()); !slices.Equal(got, []string{runName("2026-12-01T11:41:05Z")}) {
		t.Errorf("runs %v, want one run for now", got)
	}
	if last := g.policy().Status.LastScheduleTime; last == nil || !last.Time.Equal(at("2026-12-01T11:41:05Z")) {
		t.Errorf("lastScheduleTime %v, want now", last)
	}
}

func TestTimeZones(t *testing.T) {
	for _, tc := range []struct {
		name, schedule string
		zone           *string
		wantNext       string
	}{
		{"UTC by default", "0 3 * * *", nil, "2026-12-02T03:00:00Z"},
		{"CRON_TZ prefix", "CRON_TZ=Europe/Berlin 0 3 * * *", nil, "2026-12-02T02:00:00Z"},
		{"TZ prefix", "TZ=America/New_York 0 3 * * *", nil, "2026-12-02T08:00:00Z"},
		{"timeZone field", "0 3 * * *", ptr.To("Asia/Tokyo"), "2026-12-01T18:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, policy(func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.Schedule, p.Spec.TimeZone = tc.schedule, tc.zone }))
			f.reconcileAt("2026-12-01T10:05:00Z")
			if next := f.policy().Status.NextScheduleTime; next == nil || !next.Time.Equal(at(tc.wantNext)) {
				t.Fatalf("next %v, want %s", next, tc.wantNext)
			}
			f.reconcileAt(tc.wantNext)
			if got := names(f.runs()); !slices.Equal(got, []string{runName(tc.wantNext)}) {
				t.Errorf("runs %v, want one at %s", got, tc.wantNext)
			}
		})
	}
}

// Input the API server accepts but the controller cannot use: a condition
// with the reason, one Warning Event, no run and no error (no hot loop).
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(*v1alpha2.EtcdDefragPolicy)
		reason string
	}{
		{"not cron", func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.Schedule = "61 * * * *" }, conditions.ReasonInvalidSchedule},
		{"unknown zone prefix", func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.Schedule = "CRON_TZ=Mars/Olympus 0 3 * * *" }, conditions.ReasonInvalidSchedule},
		{"unknown timeZone", func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.TimeZone = ptr.To("Mars/Olympus") }, conditions.ReasonInvalidTimeZone},
		{"empty cluster name", func(p *v1alpha2.EtcdDefragPolicy) { p.Spec.ClusterRef.Name = "" }, conditions.ReasonRunRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, policy(tc.mod))
			res := f.reconcileAt("2026-12-01T10:05:00Z")
			f.reconcileAt("2026-12-01T10:05:10Z")
			c := active(f)
			if len(f.runs()) != 0 || res.RequeueAfter != 0 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
				t.Fatalf("runs %v, back after %s, Active %+v", names(f.runs()), res.RequeueAfter, c)
			}
			ev := f.drainEvents()
			if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+tc.reason) {
				t.Errorf("events %v, want one Warning %s", ev, tc.reason)
			}
			if f.policy().Status.NextScheduleTime != nil {
				t.Errorf("nextScheduleTime set for a policy that cannot run")
			}
		})
	}
}

// The run name of a tick taken by an object the policy does not control:
// reported, not adopted.
func TestRunNameTaken(t *testing.T) {
	taken := &v1alpha2.EtcdDefrag{
		ObjectMeta: metav1.ObjectMeta{Name: runName("2026-12-01T10:01:00Z"), Namespace: "ns"},
		Spec:       v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: "other"}},
	}
	f := newFixture(t, policy(), taken)
	f.reconcileAt("2026-12-01T10:01:05Z")
	c := active(f)
	st := f.policy().Status
	if c == nil || c.Reason != conditions.ReasonRunRejected || !strings.Contains(c.Message, "is not this policy's") ||
		len(st.Active) != 0 || st.LastScheduleTime != nil {
		t.Errorf("Active %+v, status %+v", c, st)
	}
}
