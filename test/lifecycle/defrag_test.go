package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	defragctrl "github.com/seed74754924/etcd-operator/internal/controller/defrag"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Issue 22, item 1: the EtcdDefrag controller, driven against the fake etcd
// next to the cluster and member controllers. Every Defragment call is
// checked when it is made (checkDefrag): never the leader of several
// members, never while the cluster is not at rest.

const mib = 1 << 20

// createDefrag creates an EtcdDefrag for the cluster.
func (h *harness) createDefrag(name, cluster string, mods ...func(*v1alpha2.EtcdDefrag)) {
	h.t.Helper()
	h.uids++
	d := &v1alpha2.EtcdDefrag{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(h.clock.Now())},
		Spec: v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: cluster}},
	}
	for _, m := range mods {
		m(d)
	}
	if err := h.c.Create(context.Background(), d); err != nil {
		h.t.Fatal(err)
	}
}

// getDefrag returns the run, nil once it is gone.
func (h *harness) getDefrag(name string) *v1alpha2.EtcdDefrag {
	h.t.Helper()
	d := &v1alpha2.EtcdDefrag{}
	err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *harness) defragFinished(name string) func() bool {
	return func() bool {
		d := h.getDefrag(name)
		return d != nil && (d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed)
	}
}

// fragment gives every member of the cluster a backend of size bytes with
// inUse of them in use.
func (h *harness) fragment(cluster string, size, inUse int64) {
	for _, m := range h.members(cluster) {
		h.etcd.SetDBSize(manifest.PeerURL(&m), size, inUse)
	}
}

// memberAt finds the etcd member serving a client URL.
func (h *harness) memberAt(endpoint string) (etcd.Member, bool) {
	for _, m := range h.etcd.Members() {
		if slices.Contains(m.ClientURLs, endpoint) {
			return m, true
		}
	}
	return etcd.Member{}, false
}

// checkDefrag fails the test when a Defragment call would block the leader
// of a cluster of several members, or comes while its cluster is not at
// rest (a roll-out, a membership change, behind its spec).
func (h *harness) checkDefrag(endpoint string) {
	em, ok := h.memberAt(endpoint)
	if !ok {
		return
	}
	if len(h.etcd.Members()) > 1 && em.ID == h.etcd.Leader() {
		h.t.Errorf("defragmenting %s while it leads", em.Name)
	}
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.raw.List(context.Background(), clusters)
	for _, c := range clusters.Items {
		p := conditions.Get(c.Status.Conditions, conditions.Progressing)
		if p == nil || p.Reason != conditions.ReasonReconciled || p.ObservedGeneration != c.Generation {
			h.t.Errorf("defragmenting %s while cluster %s is not at rest: %+v", em.Name, c.Name, p)
		}
	}
}

// defragCalls are the members defragmented, in order, by name.
func (h *harness) defragCalls() []string {
	var out []string
	for _, c := range h.calls {
		if ep, ok := strings.CutPrefix(c, "defrag "); ok && !strings.Contains(ep, "refused") {
			m, _ := h.memberAt(ep)
			out = append(out, m.Name)
		}
	}
	return out
}

func checked(d *v1alpha2.EtcdDefrag) *metav1.Condition {
	return conditions.Get(d.Status.Conditions, conditions.DefragChecked)
}

// The followers go first, the leader last and only after it handed its
// leadership over; each row says what was reclaimed.
func TestDefragLeaderLastAfterHandOver(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	leader := h.leaderName()
	h.createDefrag("d", "c")
	h.run("defrag", h.defragFinished("d"))
	d := h.getDefrag("d")
	if d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmented != 3 || d.Status.StartedAt == nil || d.Status.CompletedAt == nil {
		t.Fatalf("run ended %s with %d defragmented: %+v", d.Status.Phase, d.Status.Defragmented, d.Status)
	}
	rows := d.Status.Members
	if last := rows[len(rows)-1]; last.Name != leader || last.Role != v1alpha2.DefragRoleLeader {
		t.Errorf("the last member is %s (%s), want the leader %s", last.Name, last.Role, leader)
	}
	for _, r := range rows {
		if r.Outcome != v1alpha2.DefragOutcomeDefragmented || r.DBSizeBefore != 300*mib || r.DBSizeAfter != 50*mib || r.ReclaimedBytes != 250*mib || r.FinishedAt == nil {
			t.Errorf("member row %+v", r)
		}
	}
	calls := h.defragCalls()
	if len(calls) != 3 || calls[2] != leader {
		t.Errorf("defragmented %v, want the leader %s last", calls, leader)
	}
	moved := slices.IndexFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "move-leader") })
	if moved < 0 {
		t.Errorf("leadership never moved: %v", h.calls)
	}
	if h.leaderName() == leader {
		t.Errorf("%s still leads", leader)
	}
	if c := checked(d); c == nil || c.Reason != conditions.ReasonDefragComplete || c.Message != "3/3 members defragmented" {
		t.Errorf("condition %+v", c)
	}
}

// A member below the rule's threshold is skipped with its reason; a leader
// skipped keeps its leadership.
func TestDefragSkipsMembersBelowThreshold(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 100*mib, 90*mib)
	f := h.follower("c")
	h.etcd.SetDBSize(manifest.PeerURL(&f), 400*mib, 100*mib)
	leader := h.leaderName()
	h.createDefrag("d", "c")
	h.run("defrag", h.defragFinished("d"))
	d := h.getDefrag("d")
	if d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmented != 1 {
		t.Fatalf("run ended %s with %d defragmented", d.Status.Phase, d.Status.Defragmented)
	}
	for _, r := range d.Status.Members {
		switch {
		case r.Name == f.Name && r.Outcome != v1alpha2.DefragOutcomeDefragmented:
			t.Errorf("the fragmented follower: %+v", r)
		case r.Name != f.Name && (r.Outcome != v1alpha2.DefragOutcomeSkipped || r.Reason != defragctrl.ReasonBelowThreshold || r.DBSizeBefore != 100*mib):
			t.Errorf("a member below the threshold: %+v", r)
		}
	}
	if h.leaderName() != leader || slices.ContainsFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "move-leader") }) {
		t.Errorf("leadership moved although the leader was skipped: %v", h.calls)
	}
}

// A run asked for during a roll-out or a membership change waits, saying
// so, and runs once the cluster is at rest (checkDefrag fails any
// Defragment call made before).
func TestDefragWaitsForTheClusterToBeAtRest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness)
		want   int
	}{
		{"roll-out", func(h *harness) {
			h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) {
				s.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("200m")}}
			})
		}, 3},
		{"scale up", func(h *harness) { h.setReplicas("c", 5) }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.createCluster("c", 3)
			h.run("3", h.converged("c", 3))
			h.fragment("c", 300*mib, 50*mib)
			tc.change(h)
			h.createDefrag("d", "c")
			h.step()
			d := h.getDefrag("d")
			if c := checked(d); d.Status.Phase != v1alpha2.DefragPending || c == nil || c.Reason != conditions.ReasonClusterBusy || !strings.Contains(c.Message, "not at rest") {
				t.Fatalf("during the change: phase %s, condition %+v", d.Status.Phase, c)
			}
			if len(h.events.notes("DefragDeferred")) == 0 {
				t.Error("no DefragDeferred Event")
			}
			h.run("defrag", h.defragFinished("d"))
			if !h.converged("c", tc.want)() {
				t.Errorf("the run finished before the cluster converged:\n%s", h.dump())
			}
			if d := h.getDefrag("d"); d.Status.Phase != v1alpha2.DefragComplete {
				t.Errorf("run ended %s: %+v", d.Status.Phase, checked(d))
			}
		})
	}
}

// One run per cluster: the younger waits, queued, until the older finished.
func TestDefragOneRunPerCluster(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	h.createDefrag("first", "c")
	h.clock.Step(time.Second)
	h.createDefrag("second", "c")
	for !h.defragFinished("first")() {
		h.step()
		if h.defragFinished("first")() {
			break
		}
		s := h.getDefrag("second")
		if c := checked(s); s.Status.Phase != v1alpha2.DefragPending || c == nil || c.Reason != conditions.ReasonQueued || !strings.Contains(c.Message, "first") {
			t.Fatalf("while the first runs, the second is %s: %+v", s.Status.Phase, c)
		}
		if h.stepNo > 100 {
			t.Fatalf("the first run does not finish:\n%s", h.dump())
		}
	}
	h.run("second", h.defragFinished("second"))
	if s := h.getDefrag("second"); s.Status.Phase != v1alpha2.DefragComplete {
		t.Errorf("the second ended %s", s.Status.Phase)
	}
}

// A run that cannot start (the cluster is unhealthy) fails when its
// deadline passes, with the reason and what it waited for.
func TestDefragDeadlineExceeded(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	f := h.follower("c")
	h.etcd.RaiseAlarm(manifest.PeerURL(&f), etcd.AlarmCorrupt)
	h.createDefrag("d", "c")
	h.steps(2)
	d := h.getDefrag("d")
	// The alarm fails the member's readiness probe too, so the cluster
	// controller may report itself busy first.
	if c := checked(d); d.Status.Phase != v1alpha2.DefragPending || c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("with a CORRUPT alarm: phase %s, condition %+v", d.Status.Phase, c)
	}
	h.clock.Step(defragctrl.Deadline)
	h.steps(2)
	d = h.getDefrag("d")
	if c := checked(d); d.Status.Phase != v1alpha2.DefragFailed || c == nil || c.Reason != conditions.ReasonDeadlineExceeded || !strings.Contains(c.Message, "could not start") {
		t.Fatalf("past the deadline: phase %s, condition %+v", d.Status.Phase, c)
	}
	if len(h.defragCalls()) != 0 || len(h.events.notes(conditions.ReasonDeadlineExceeded)) != 1 {
		t.Errorf("defragmented %v; DeadlineExceeded Events %v; all %v", h.defragCalls(), h.events.notes(conditions.ReasonDeadlineExceeded), h.events.events)
	}
}

// ttlSecondsAfterFinished deletes a finished run when it is due; 0 at once.
func TestDefragTTL(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.createDefrag("kept", "c", func(d *v1alpha2.EtcdDefrag) { d.Spec.TTLSecondsAfterFinished = ptr.To[int32](20) })
	h.run("kept", h.defragFinished("kept"))
	done := h.getDefrag("kept").Status.CompletedAt.Time
	h.run("deleted", func() bool { return h.getDefrag("kept") == nil })
	if waited := h.clock.Now().Sub(done); waited < 20*time.Second || waited > 23*time.Second {
		t.Errorf("deleted %s after it finished, want 20s", waited)
	}
	h.createDefrag("zero", "c", func(d *v1alpha2.EtcdDefrag) { d.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) })
	h.run("zero", func() bool { return h.getDefrag("zero") == nil })
	h.createDefrag("forever", "c")
	h.run("forever", h.defragFinished("forever"))
	h.steps(30)
	if h.getDefrag("forever") == nil {
		t.Error("a run without a TTL was deleted")
	}
}

// A NOSPACE alarm does not stop a run, and is disarmed after it reclaimed
// space.
func TestDefragDisarmsNoSpace(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	f := h.follower("c")
	h.etcd.RaiseAlarm(manifest.PeerURL(&f), etcd.AlarmNoSpace)
	h.createDefrag("d", "c")
	h.run("defrag", h.defragFinished("d"))
	if d := h.getDefrag("d"); d.Status.Phase != v1alpha2.DefragComplete {
		t.Fatalf("run ended %s: %+v", d.Status.Phase, checked(d))
	}
	if a := h.etcd.Alarms(); len(a) != 0 {
		t.Errorf("alarms left: %v", a)
	}
}

// A failed Defragment fails that member; the run goes on with the others,
// still disarms NOSPACE, and ends Failed/MemberFailed.
func TestDefragMemberFailure(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	f := h.follower("c")
	h.etcd.FailDefragment(manifest.PeerURL(&f), 1)
	h.etcd.RaiseAlarm(manifest.PeerURL(&f), etcd.AlarmNoSpace)
	h.createDefrag("d", "c")
	h.run("defrag", h.defragFinished("d"))
	d := h.getDefrag("d")
	if c := checked(d); d.Status.Phase != v1alpha2.DefragFailed || c.Reason != conditions.ReasonMemberFailed || d.Status.Defragmented != 2 {
		t.Fatalf("run ended %s, %d defragmented: %+v", d.Status.Phase, d.Status.Defragmented, c)
	}
	for _, r := range d.Status.Members {
		if r.Name == f.Name && (r.Outcome != v1alpha2.DefragOutcomeFailed || r.Reason != defragctrl.ReasonRPCError) {
			t.Errorf("the failing member: %+v", r)
		}
	}
	if a := h.etcd.Alarms(); len(a) != 0 {
		t.Errorf("alarms left: %v", a)
	}
}

// A member that turns unhealthy between two steps pauses the run (it
// stays Running and defragments nothing more) until it is healthy again.
func TestDefragPausesOnAnUnhealthyCluster(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	h.createDefrag("d", "c")
	h.run("first member", func() bool { return len(h.defragCalls()) == 1 })
	var next v1alpha2.EtcdMember
	for _, r := range h.getDefrag("d").Status.Members {
		if r.Outcome == v1alpha2.DefragOutcomePending {
			next = *h.memberNamed(r.Name)
			break
		}
	}
	h.etcd.Isolate(manifest.PeerURL(&next), true)
	h.steps(10)
	d := h.getDefrag("d")
	if c := checked(d); d.Status.Phase != v1alpha2.DefragRunning || c == nil || c.Status != metav1.ConditionFalse || len(h.defragCalls()) != 1 {
		t.Fatalf("with %s cut off: phase %s, condition %+v, defragmented %v", next.Name, d.Status.Phase, c, h.defragCalls())
	}
	h.etcd.Isolate(manifest.PeerURL(&next), false)
	h.run("defrag", h.defragFinished("d"))
	if d := h.getDefrag("d"); d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmented != 3 {
		t.Errorf("run ended %s with %d defragmented", d.Status.Phase, d.Status.Defragmented)
	}
}

// A run for a cluster that does not exist fails at once.
func TestDefragClusterNotFound(t *testing.T) {
	h := newHarness(t)
	h.createDefrag("d", "nope")
	h.step()
	d := h.getDefrag("d")
	if c := checked(d); d.Status.Phase != v1alpha2.DefragFailed || c == nil || c.Reason != conditions.ReasonClusterNotFound {
		t.Fatalf("phase %s, condition %+v", d.Status.Phase, c)
	}
}

// Time spent queued does not count against a run's deadline: a run queued
// behind one that used up its own deadline gets a deadline of its own when
// its turn comes.
func TestDefragQueuedTimeDoesNotCount(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	f := h.follower("c")
	h.etcd.RaiseAlarm(manifest.PeerURL(&f), etcd.AlarmCorrupt)
	h.createDefrag("first", "c")
	h.createDefrag("second", "c")
	h.steps(2)
	h.clock.Step(defragctrl.Deadline)
	h.steps(2)
	if d := h.getDefrag("first"); d.Status.Phase != v1alpha2.DefragFailed {
		t.Fatalf("the first run is %s past its deadline", d.Status.Phase)
	}
	s := h.getDefrag("second")
	if c := checked(s); s.Status.Phase != v1alpha2.DefragPending || c == nil || c.Reason == conditions.ReasonQueued {
		t.Fatalf("the second run, now first in line: phase %s, condition %+v", s.Status.Phase, c)
	}
	h.etcd.DisarmAlarms()
	h.run("second", h.defragFinished("second"))
	if s := h.getDefrag("second"); s.Status.Phase != v1alpha2.DefragComplete || s.Status.Defragmented != 3 {
		t.Errorf("the second run ended %s with %d defragmented: %+v", s.Status.Phase, s.Status.Defragmented, checked(s))
	}
}
