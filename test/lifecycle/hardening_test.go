package lifecycle

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The membership hardening claims (issue 8), one test each. Each scenario
// runs under the oracle of invariants_test.go as well.

func progressing(h *harness, name string) *metav1.Condition {
	return conditions.Get(h.getCluster(name).Status.Conditions, conditions.Progressing)
}

func withDeadline(s int32) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) { c.Spec.ProgressDeadlineSeconds = ptr.To(s) }
}

func gone(h *harness, cluster, member string) func() bool {
	return func() bool {
		return !slices.ContainsFunc(h.members(cluster), func(m v1alpha2.EtcdMember) bool { return m.Name == member })
	}
}

// nodeOf is the node the member's Pod runs on.
func (h *harness) nodeOf(member string) string { return h.nodes[member] }

// Claim 1: a missed deadline is a report, not a latch. The target reached
// later clears it, and a member lost afterwards is replaced.
func TestDeadlineDoesNotStopRepair(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 1, withDeadline(20))
	h.run("1", h.converged("c", 1))
	h.breakAll = true
	h.setReplicas("c", 3)
	h.run("deadline exceeded", func() bool {
		c := progressing(h, "c")
		return c != nil && c.Reason == conditions.ReasonDeadlineExceeded
	})
	h.breakAll = false
	h.run("reached after the deadline", h.converged("c", 3))
	victim := h.members("c")[1].Name
	h.stopNode(h.nodeOf(victim))
	h.run("lost member replaced", func() bool { return gone(h, "c", victim)() && h.converged("c", 3)() })
}

// Claim 2: a learner that cannot start holds etcd's learner slot, but does
// not keep another lost voter from being removed; it is itself replaced
// once its own deadline passes.
func TestStuckLearnerDoesNotBlockRepair(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 5, withDeadline(120))
	h.run("5", h.converged("c", 5))
	ms := h.members("c")
	h.breakAll = true
	h.stopNode(h.nodeOf(ms[1].Name))
	h.run("first lost voter removed, its replacement stuck", func() bool {
		return gone(h, "c", ms[1].Name)() && len(h.members("c")) == 5
	})
	lostVoterID, _ := etcd.ParseID(h.memberNamed(ms[2].Name).Status.MemberID)
	h.stopNode(h.nodeOf(ms[2].Name))
	// Within a minute (the learner's own deadline is two): the second lost
	// voter leaves etcd although the learner never started.
	for range 60 {
		h.step()
		if !slices.ContainsFunc(h.etcd.Members(), func(m etcd.Member) bool { return m.ID == lostVoterID }) {
			break
		}
	}
	if slices.ContainsFunc(h.etcd.Members(), func(m etcd.Member) bool { return m.ID == lostVoterID }) {
		t.Fatalf("the second lost voter is still in etcd while a learner is stuck:\n%s", h.dump())
	}
	h.breakAll = false
	h.run("repaired", h.converged("c", 5))
}

// Claim 3: members deleted at the same moment are removed from etcd one at
// a time, each against the membership the previous one left, however many
// reconciles run at once.
func TestConcurrentDeletionsKeepQuorum(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 4)
	h.run("4", h.converged("c", 4))
	ms := h.members("c")
	// The member cut off is the last by name, so no reconcile happens to
	// ask it first.
	h.etcd.Isolate(manifest.PeerURL(&ms[3]), true)
	h.steps(10)
	for _, m := range ms[0:2] {
		if err := h.c.Delete(context.Background(), &m); err != nil {
			t.Fatal(err)
		}
	}
	// Every reconcile that could act on the deletions, at once.
	h.barrier(2)
	var wg sync.WaitGroup
	for _, m := range ms[0:2] {
		wg.Go(func() {
			_, err := h.member.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
			h.checkError("member "+m.Name, err)
		})
	}
	wg.Go(func() {
		_, err := h.cluster.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}})
		h.checkError("cluster", err)
	})
	wg.Wait()
	h.barrier(0)
	t.Logf("etcd calls so far: %q", h.calls)
	h.steps(10)
	if !h.etcd.QuorumConnected() {
		t.Fatalf("quorum lost:\n%s", h.dump())
	}
	h.etcd.Isolate(manifest.PeerURL(&ms[3]), false)
	h.run("both deletions done, back to 4", func() bool {
		return gone(h, "c", ms[0].Name)() && gone(h, "c", ms[1].Name)() && h.converged("c", 4)()
	})
}

// Claim 4: a user's deletion refused to protect quorum does not hold the
// repair of another, lost member; the deletion goes through once safe.
func TestRefusedDeletionDoesNotBlockRepair(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	ms := h.members("c")
	h.stopNode(h.nodeOf(ms[0].Name))
	if err := h.c.Delete(context.Background(), &ms[1]); err != nil {
		t.Fatal(err)
	}
	h.run("lost member replaced and the deletion done", func() bool {
		return gone(h, "c", ms[0].Name)() && gone(h, "c", ms[1].Name)() && h.converged("c", 3)()
	})
}

// Claim 5: a member whose claim is gone lost its data: it is replaced, never
// restarted on a new empty claim under its old identity (the kubelet
// stand-in fails the test if it is).
func TestDeletedClaimMeansDataLoss(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	victim := h.members("c")[1]
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: manifest.PVCName(victim.Name)}}
	if err := h.raw.Delete(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	h.deletePod(victim.Name)
	h.run("replaced", func() bool { return gone(h, "c", victim.Name)() && h.converged("c", 3)() })
	lost := h.events.notes(conditions.ReasonReplacingMember)
	if !slices.ContainsFunc(lost, func(n string) bool {
		return strings.Contains(n, victim.Name) && strings.Contains(n, conditions.ReasonDataDirLost)
	}) {
		t.Errorf("the member was not replaced as data-lost: %q", lost)
	}
}

// Claim 6: during a scale up and down, only voters serve clients: the client
// Service selects voters only (checked at every step by the oracle), and
// readyMembers never counts a learner.
func TestOnlyVotersServeClients(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.checkClientEndpoints = true
	h.run("3", h.converged("c", 3))
	for _, n := range []int32{5, 3} {
		h.setReplicas("c", n)
		h.run("scale", h.converged("c", int(n)))
	}
}

// Claim 7: the leader hands over its leadership before it is removed.
func TestLeaderMovesBeforeRemoval(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	newest := newest(h.members("c"))
	id, _ := etcd.ParseID(newest.Status.MemberID)
	h.moveLeaderTo(id)
	h.setReplicas("c", 2)
	h.run("2", h.converged("c", 2))
	moved := slices.IndexFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "move-leader ") && !strings.Contains(c, "refused") })
	removed := slices.Index(h.calls, "remove "+etcd.FormatID(id))
	if moved < 0 || removed < moved {
		t.Fatalf("the leader was not moved before its removal: %q", h.calls)
	}
}

// Claim 8: identity comes from the member's spec and owner, and etcd's
// cluster ID is checked on every membership read and recovered when lost.
func TestIdentityIgnoresEditedLabelsAndAnnotations(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	ms := h.members("c")
	edit := func(m v1alpha2.EtcdMember, fn func(*v1alpha2.EtcdMember)) {
		cur := h.memberNamed(m.Name)
		patch := client.MergeFrom(cur.DeepCopy())
		fn(cur)
		if err := h.raw.Patch(context.Background(), cur, patch); err != nil {
			t.Fatal(err)
		}
	}
	edit(ms[1], func(m *v1alpha2.EtcdMember) { delete(m.Labels, manifest.LabelCluster) })
	edit(ms[2], func(m *v1alpha2.EtcdMember) {
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationHeadlessService, "elsewhere")
	})
	h.steps(20)
	if n := len(h.etcd.Members()); n != 3 || slices.ContainsFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "remove ") }) {
		t.Fatalf("edited labels or annotations cost a member (%d in etcd): %q\n%s", n, h.calls, h.dump())
	}
	if !h.converged("c", 3)() {
		t.Fatalf("not converged after the edits:\n%s", h.dump())
	}
}

func TestClusterIDMismatchStopsMembershipChanges(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	c := h.getCluster("c")
	patch := client.MergeFrom(c.DeepCopy())
	c.Status.ClusterID = "00000000000000ff"
	if err := h.raw.Status().Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	h.setReplicas("c", 5)
	h.steps(20)
	if n := len(h.etcd.Members()); n != 3 {
		t.Fatalf("the operator changed the membership of a cluster whose ID is not the latched one: %d members", n)
	}
	d := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Degraded)
	if d == nil || d.Reason != conditions.ReasonClusterIDMismatch {
		t.Fatalf("no ClusterIDMismatch condition: %+v", d)
	}
}

func TestLostStatusIsRecoveredFromTheMembers(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	id := h.getCluster("c").Status.ClusterID
	c := h.getCluster("c")
	patch := client.MergeFrom(c.DeepCopy())
	c.Status = v1alpha2.EtcdClusterStatus{}
	if err := h.raw.Status().Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	h.run("recovered", h.converged("c", 3))
	if got := h.getCluster("c").Status.ClusterID; got != id {
		t.Fatalf("cluster ID %q recovered as %q", id, got)
	}
	h.setReplicas("c", 4)
	h.run("and it still scales", h.converged("c", 4))
}

// Claim 9: the budget follows the voters that remain: during 5 → 3 it never
// allows an eviction that, with the removals under way, breaks quorum (the
// oracle checks it at every step).
func TestBudgetFollowsRemainingVoters(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 5)
	h.run("5", h.converged("c", 5))
	h.setReplicas("c", 3)
	h.run("3", h.converged("c", 3))
}

// A refusal to protect quorum is one Warning Event while it lasts, not one
// per retry: a lost voter whose removal needs a quorum of healthy voters,
// while a second voter's Pod is not Ready (its etcd runs, but nothing proves
// it serves).
func TestRefusalIsOneEvent(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	ms := h.members("c")
	h.probeFails[ms[2].Name] = true
	h.stopNode(h.nodeOf(ms[0].Name))
	h.steps(60)
	// One on the cluster, one on the member that waits.
	notes := h.events.notes(conditions.ReasonRefused)
	if len(notes) != 2 || !strings.HasPrefix(notes[0], "c: ") || !strings.HasPrefix(notes[1], ms[0].Name+": ") {
		t.Fatalf("refusal Events in 60 s of one refusal: %q; want one on the cluster and one on %s\n%s", notes, ms[0].Name, h.dump())
	}
	if c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Degraded); c == nil || c.Reason != conditions.ReasonRefused || !strings.Contains(c.Message, ms[0].Name) {
		t.Errorf("the cluster does not say which removal waits: %+v", c)
	}
	if len(h.etcd.Members()) != 3 {
		t.Errorf("etcd lost a member:\n%s", h.etcd.String())
	}
}

// A restored cluster's seed is never started without its restore: with no
// operator image to run the restore agent from, the seed waits and both the
// member and the cluster say why; with one, the seed's Pod restores first.
func TestRestoreNeedsTheOperatorImage(t *testing.T) {
	h := newHarness(t)
	h.cluster.OperatorImage, h.member.OperatorImage = "", ""
	h.createCluster("restore", 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Bootstrap = &v1alpha2.BootstrapSpec{Restore: &v1alpha2.RestoreSpec{Source: v1alpha2.SnapshotLocation{
			PVC: &v1alpha2.PVCLocation{ClaimName: "snapshots", SubPath: "x.db"},
		}}}
	})
	h.steps(10)
	ms := h.members("restore")
	if len(ms) != 1 || ms[0].Spec.Restore == nil || len(h.pods()) != 0 {
		t.Fatalf("want one seed with the restore and no Pod; members %d, pods %v", len(ms), h.pods())
	}
	if r := conditions.Get(ms[0].Status.Conditions, conditions.Ready); r == nil || r.Reason != conditions.ReasonOperatorImageNotConfigured {
		t.Errorf("seed Ready = %+v, want reason %s", r, conditions.ReasonOperatorImageNotConfigured)
	}
	if p := conditions.Get(h.getCluster("restore").Status.Conditions, conditions.Progressing); p == nil || p.Reason != conditions.ReasonOperatorImageNotConfigured {
		t.Errorf("cluster Progressing = %+v, want reason %s", p, conditions.ReasonOperatorImageNotConfigured)
	}

	h.cluster.OperatorImage, h.member.OperatorImage = operatorImage, operatorImage
	h.steps(2)
	pod := &corev1.Pod{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ms[0].Name}, pod); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != manifest.InstallToolsContainer+","+manifest.RestoreContainer {
		t.Errorf("seed Pod init containers = %v, want the restore's", names)
	}
}

func (h *harness) moveLeaderTo(id uint64) {
	h.t.Helper()
	var leader *v1alpha2.EtcdMember
	for _, m := range h.members("c") {
		if lid, _ := etcd.ParseID(m.Status.MemberID); lid == h.etcd.Leader() {
			leader = &m
		}
	}
	c, err := h.etcd.Dialer()(context.Background(), etcd.Config{Endpoints: []string{manifest.ClientURL(leader)}})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := c.MoveLeader(context.Background(), id); err != nil {
		h.t.Fatal(err)
	}
}

func newest(ms []v1alpha2.EtcdMember) v1alpha2.EtcdMember {
	out := ms[0]
	for _, m := range ms[1:] {
		if m.CreationTimestamp.After(out.CreationTimestamp.Time) || (m.CreationTimestamp.Equal(&out.CreationTimestamp) && m.Name > out.Name) {
			out = m
		}
	}
	return out
}

// barrier makes the next n MemberRemove calls wait for each other (up to a
// second), so that reconciles running at once reach etcd at once; 0 turns
// it off.
func (h *harness) barrier(n int) {
	h.gate.Lock()
	defer h.gate.Unlock()
	h.gateWant, h.gateArrived = n, 0
	h.gateOpen = make(chan struct{})
}

func (h *harness) waitAtBarrier() {
	h.gate.Lock()
	if h.gateWant == 0 {
		h.gate.Unlock()
		return
	}
	h.gateArrived++
	open := h.gateOpen
	if h.gateArrived >= h.gateWant {
		close(open)
		h.gateWant = 0
	}
	h.gate.Unlock()
	select {
	case <-open:
	case <-time.After(time.Second):
	}
}
