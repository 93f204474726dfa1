package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// loseQuorum wipes every member of the cluster but one follower (the
// survivor, returned), so that etcd has no quorum and no leader.
func (h *harness) loseQuorum(cluster string) v1alpha2.EtcdMember {
	h.t.Helper()
	survivor := h.follower(cluster)
	for _, m := range h.members(cluster) {
		if m.Name != survivor.Name {
			h.wipe(m.Name)
		}
	}
	return survivor
}

// annotateRecover sets the recovery request on the cluster.
func (h *harness) annotateRecover(cluster, value string) {
	h.t.Helper()
	c := h.getCluster(cluster)
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[manifest.AnnotationRecover] = value
	if err := h.raw.Patch(context.Background(), c, patch); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) recovery(cluster string) *v1alpha2.RecoveryStatus {
	return h.getCluster(cluster).Status.Recovery
}

// resourceVersions are the members', Pods' and claims' resource versions.
func (h *harness) resourceVersions() map[string]string {
	out := map[string]string{}
	ctx := context.Background()
	ms := &v1alpha2.EtcdMemberList{}
	_ = h.raw.List(ctx, ms)
	for _, m := range ms.Items {
		out["member/"+m.Name] = m.ResourceVersion
	}
	pods := &corev1.PodList{}
	_ = h.raw.List(ctx, pods)
	for _, p := range pods.Items {
		// The kubelet writes the Pods' status; the operator only their
		// metadata.
		out["pod/"+p.Name] = fmt.Sprintf("%s %v %v", p.UID, p.Labels, p.Annotations)
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = h.raw.List(ctx, pvcs)
	for _, p := range pvcs.Items {
		out["pvc/"+p.Name] = p.ResourceVersion
	}
	return out
}

// A cluster that lost two of its three members says so and waits; the dry
// run reports the plan and changes nothing; a stale token is refused; the
// plan's token restarts the survivor alone (its data, cluster ID and member
// ID kept), deletes the others, and the cluster grows back to 3 through
// learners. The survivor's mark is off before anything joins.
func TestQuorumLossRecoveredFromTheSurvivor(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	clusterID := h.getCluster("c").Status.ClusterID
	survivor := h.loseQuorum("c")
	h.run("quorum loss reported", func() bool {
		c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost && strings.Contains(c.Message, "gone:")
	})
	// Nothing happens by itself.
	rec := h.dryRun(survivor.Name)

	h.annotateRecover("c", "0123456789ab")
	h.steps(5)
	if r := h.recovery("c"); r.Phase != v1alpha2.RecoveryPlanned || !strings.Contains(r.Message, "not the current plan") {
		t.Fatalf("a wrong token was not refused: %+v", r)
	}
	if h.forced[survivor.Name] != 0 {
		t.Fatal("a wrong token forced a new cluster")
	}

	h.annotateRecover("c", rec.Token)
	h.afterCluster = func() {
		if h.forced[survivor.Name] > 0 && len(h.etcd.Members()) > 1 {
			p := &corev1.Pod{}
			if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: survivor.Name}, p); err == nil && p.Annotations[manifest.AnnotationForceNewCluster] != "" {
				h.t.Errorf("a member joined while the survivor's Pod still forces a new cluster")
			}
		}
	}
	h.run("recovered", func() bool {
		r := h.recovery("c")
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted && h.converged("c", 3)()
	})
	h.checkRecovered(survivor, clusterID, rec)
}

// A cluster with its quorum answers a recovery request with NotNeeded and
// restarts nothing.
func TestRecoveryRefusedWithQuorum(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	before := h.resourceVersions()
	h.annotateRecover("c", manifest.RecoverDryRun)
	h.run("answered", func() bool { r := h.recovery("c"); return r != nil && r.Phase == v1alpha2.RecoveryNotNeeded })
	h.annotateRecover("c", "0123456789ab")
	h.steps(5)
	if r := h.recovery("c"); r.Phase != v1alpha2.RecoveryNotNeeded {
		t.Errorf("a token on a healthy cluster: %+v", r)
	}
	after := h.resourceVersions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %s -> %s", k, v, after[k])
		}
	}
}

// recoverWithConsent loses quorum, asks for the dry run, and gives the
// plan's token back as soon as the plan is reported, as a person would.
func (h *harness) recoverWithConsent(cluster string) {
	h.loseQuorum(cluster)
	h.annotateRecover(cluster, manifest.RecoverDryRun)
	h.afterCluster = func() {
		c := h.getCluster(cluster)
		if r := c.Status.Recovery; r != nil && r.Phase == v1alpha2.RecoveryPlanned && c.Annotations[manifest.AnnotationRecover] == manifest.RecoverDryRun {
			h.annotateRecover(cluster, r.Token)
		}
	}
}

// recovered: the recovery completed.
func recovered(h *harness) bool {
	r := h.recovery("c")
	return r != nil && r.Phase == v1alpha2.RecoveryCompleted
}

// checkRecovered checks the end of a recovery: the survivor forced once and
// unmarked, the same cluster and member IDs, the discarded members gone.
func (h *harness) checkRecovered(survivor v1alpha2.EtcdMember, clusterID string, rec *v1alpha2.RecoveryStatus) {
	t := h.t
	t.Helper()
	if h.forced[survivor.Name] == 0 {
		t.Error("the survivor never started with --force-new-cluster")
	}
	if got := h.getCluster("c").Status.ClusterID; got != clusterID {
		t.Errorf("cluster ID changed from %s to %s", clusterID, got)
	}
	if h.memberNamed(survivor.Name) == nil {
		t.Fatal("the survivor is gone")
	}
	id, _ := etcd.ParseID(survivor.Status.MemberID)
	found := false
	for _, m := range h.etcd.Members() {
		found = found || m.ID == id
	}
	if !found {
		t.Error("the survivor's member ID is not in etcd's membership")
	}
	for _, d := range rec.Discarded {
		if h.memberNamed(d.Name) != nil {
			t.Errorf("discarded member %s still exists", d.Name)
		}
	}
	if m := h.memberNamed(survivor.Name); m.Annotations[manifest.AnnotationForceNewCluster] != "" {
		t.Error("the survivor keeps its mark")
	}
	h.checkKeptClaims(len(rec.Discarded))
	if len(h.events.notes("QuorumRecovered")) == 0 {
		t.Error("no QuorumRecovered event")
	}
}

// dryRun waits a while (nothing may happen by itself), asks for the plan and
// checks it: the survivor, the two discarded members with their last known
// indexes, the token in the message, and no member, Pod or claim changed.
func (h *harness) dryRun(survivor string) *v1alpha2.RecoveryStatus {
	t := h.t
	t.Helper()
	before := h.resourceVersions()
	h.steps(30)
	h.annotateRecover("c", manifest.RecoverDryRun)
	h.run("planned", func() bool { r := h.recovery("c"); return r != nil && r.Phase == v1alpha2.RecoveryPlanned })
	h.steps(10)
	rec := h.recovery("c")
	if rec.Survivor == nil || rec.Survivor.Name != survivor || len(rec.Discarded) != 2 || rec.Token == "" {
		t.Fatalf("plan: %+v\n%s", rec, h.dump())
	}
	for _, d := range rec.Discarded {
		if d.AppliedIndex == nil || d.LastSeen == nil {
			t.Errorf("discarded member %s has no last known index: %+v", d.Name, d)
		}
	}
	if !strings.Contains(rec.Message, rec.Token) {
		t.Errorf("the plan does not say how to consent: %s", rec.Message)
	}
	after := h.resourceVersions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("the dry run (or the wait before it) changed %s: %s -> %s", k, v, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects came or went during the dry run: %v -> %v", before, after)
	}
	return rec
}

// A member wiped and killed in the seconds after it joined, before its Pod
// carries its member ID, must not rejoin as itself either: the container's
// restart in the same Pod is refused by the data guard (it started etcd in
// this Pod before, and the log is gone), and the member is replaced. Found by
// the day-two bench on real nodes: etcd's first start on the empty directory
// panicked, left a fresh log behind, and the next start rejoined.
func TestWipedRightAfterJoiningIsReplaced(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	var victim string
	h.afterCluster = func() {
		if victim != "" {
			return
		}
		for _, m := range h.members("c") {
			p := &corev1.Pod{}
			if m.Status.MemberID == "" || h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Name}, p) != nil {
				continue
			}
			if p.Annotations[manifest.AnnotationMemberID] == "" && p.Status.Phase == corev1.PodRunning && len(h.members("c")) == 3 {
				victim = m.Name
				h.wipe(m.Name)
			}
		}
	}
	h.run("wiped and replaced", func() bool {
		return victim != "" && h.memberNamed(victim) == nil && h.converged("c", 3)()
	})
}

// A recovery from a snapshot seen through a cache that lags each status
// write by one read: a pass on the cluster as it was before the operator's
// last status write must not decide again from the older status. Found by
// the integration suite: a pass that still saw the plan Planned after the
// first member's deletion made a new plan (without that member) over the
// one being carried out, the consent no longer matched it, and the
// recovery stopped half way.
func TestRecoveryFromASnapshotOnALaggingCache(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	clusterID := h.getCluster("c").Status.ClusterID
	old := h.members("c")
	snap := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: ns, UID: "uid-snap"},
		Spec: v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "c"},
			Destination: v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups"}}},
	}
	// The harness's API server has no status subresource for snapshots: the
	// status goes in with the object.
	snap.Status = v1alpha2.EtcdSnapshotStatus{Phase: v1alpha2.SnapshotComplete,
		Artifact: &v1alpha2.SnapshotArtifact{URI: "file:///snapshot/data/c/snap.db", Revision: 7, EtcdVersion: "3.6.16"}}
	if err := h.raw.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	h.loseQuorum("c")
	h.run("quorum loss reported", func() bool {
		c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost
	})
	h.staleClusterReads = true
	h.restart(0)
	c := h.getCluster("c")
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{manifest.AnnotationRecoverFromSnapshot: "snap", manifest.AnnotationRecover: manifest.RecoverDryRun}
	if err := h.raw.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	h.run("planned", func() bool {
		r := h.recovery("c")
		return r != nil && r.Phase == v1alpha2.RecoveryPlanned && r.Snapshot == "snap"
	})
	plan := h.recovery("c")
	h.annotateRecover("c", plan.Token)
	h.run("recovered", func() bool {
		r := h.recovery("c")
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted && h.converged("c", 3)()
	})
	done := h.recovery("c")
	if done.Token != plan.Token {
		t.Errorf("the recovery carried out plan %s; the consent was to %s", done.Token, plan.Token)
	}
	if id := h.getCluster("c").Status.ClusterID; id == clusterID || id == "" {
		t.Errorf("cluster ID %q after a rebuild from a snapshot of %s", id, clusterID)
	}
	for _, m := range h.members("c") {
		for _, o := range old {
			if m.Name == o.Name {
				t.Errorf("member %s outlived the rebuild", m.Name)
			}
		}
	}
}

// checkKeptClaims checks that the recovery kept the discarded members'
// claims, as many as want: listed in its record, released from their
// members and labelled with the cluster's name.
func (h *harness) checkKeptClaims(want int) {
	t := h.t
	t.Helper()
	kept := h.recovery("c").KeptClaims
	if len(kept) != want {
		t.Errorf("kept claims %v, want %d", kept, want)
	}
	for _, name := range kept {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pvc); err != nil {
			t.Errorf("kept claim %s: %v", name, err)
			continue
		}
		if len(pvc.OwnerReferences) > 0 || pvc.Labels[manifest.LabelDiscardedFrom] != "c" {
			t.Errorf("kept claim %s: owners %v, labels %v", name, pvc.OwnerReferences, pvc.Labels)
		}
	}
}

// Asked to, the recovery deletes the discarded members' claims with them.
func TestRecoveryDiscardsVolumesWhenAsked(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, func(c *v1alpha2.EtcdCluster) {
		c.Annotations = map[string]string{manifest.AnnotationRecoverDiscardVolumes: "true"}
	})
	h.run("3", h.converged("c", 3))
	before := h.members("c")
	h.recoverWithConsent("c")
	h.run("recovered", func() bool { return recovered(h) && h.converged("c", 3)() })
	h.checkKeptClaims(0)
	discarded := map[string]bool{}
	for _, m := range before {
		if h.memberNamed(m.Name) == nil {
			discarded[manifest.PVCName(m.Name)] = true
		}
	}
	if len(discarded) != 2 {
		t.Fatalf("discarded claims %v", discarded)
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = h.raw.List(context.Background(), pvcs)
	for _, p := range pvcs.Items {
		if discarded[p.Name] {
			t.Errorf("claim %s of a discarded member is left", p.Name)
		}
	}
}

// Consent taken back while the discarded members are being stopped stops
// the recovery: they are woken, the survivor is never forced, no member or
// claim is deleted.
func TestRecoveryStopsWhenConsentIsTakenBack(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.loseQuorum("c")
	h.annotateRecover("c", manifest.RecoverDryRun)
	h.run("planned", func() bool { r := h.recovery("c"); return r != nil && r.Phase == v1alpha2.RecoveryPlanned })
	members := len(h.members("c"))
	h.annotateRecover("c", h.recovery("c").Token)
	h.afterCluster = func() {
		if r := h.recovery("c"); r != nil && r.Phase == v1alpha2.RecoveryFencing {
			h.annotateRecover("c", "")
			h.afterCluster = nil
		}
	}
	h.run("stopped", func() bool { r := h.recovery("c"); return r != nil && r.Phase == v1alpha2.RecoveryStopped })
	h.steps(10)
	for pod, n := range h.forced {
		if n > 0 {
			t.Errorf("%s was forced after the consent was taken back", pod)
		}
	}
	for _, m := range h.members("c") {
		if m.Spec.Dormant || m.DeletionTimestamp != nil {
			t.Errorf("member %s left dormant=%v deleting=%v", m.Name, m.Spec.Dormant, m.DeletionTimestamp != nil)
		}
	}
	if got := len(h.members("c")); got != members {
		t.Errorf("%d members, had %d", got, members)
	}
}

// Claim 5 of issue 41: a rebuild from a snapshot whose restore fails left
// the cluster without members for good. The failure is reported with what
// to do, and a rebuild from another snapshot retires the failed seed and
// completes.
func TestFailedRestoreIsRetriedFromAnotherSnapshot(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	for _, name := range []string{"bad", "good"} {
		snap := &v1alpha2.EtcdSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
			Spec: v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "c"},
				Destination: v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups"}}},
			Status: v1alpha2.EtcdSnapshotStatus{Phase: v1alpha2.SnapshotComplete,
				Artifact: &v1alpha2.SnapshotArtifact{URI: "file:///snapshot/data/c/" + name + ".db", Revision: 7, EtcdVersion: "3.6.16"}},
		}
		if err := h.raw.Create(context.Background(), snap); err != nil {
			t.Fatal(err)
		}
	}
	h.loseQuorum("c")
	h.run("quorum loss reported", func() bool {
		c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost
	})
	consentTo := func(snapshot string) {
		c := h.getCluster("c")
		patch := client.MergeFrom(c.DeepCopy())
		c.Annotations = map[string]string{manifest.AnnotationRecoverFromSnapshot: snapshot, manifest.AnnotationRecover: manifest.RecoverDryRun}
		if err := h.raw.Patch(context.Background(), c, patch); err != nil {
			t.Fatal(err)
		}
		h.run("planned from "+snapshot, func() bool {
			r := h.recovery("c")
			return r != nil && r.Phase == v1alpha2.RecoveryPlanned && r.Snapshot == snapshot
		})
		h.annotateRecover("c", h.recovery("c").Token)
	}
	h.restoreFails = "bad.db"
	consentTo("bad")
	h.run("the failed restore reported", func() bool {
		r := h.recovery("c")
		return r != nil && r.Phase == v1alpha2.RecoveryRebootstrapping && strings.Contains(r.Message, "failed") &&
			strings.Contains(r.Message, manifest.AnnotationRecoverFromSnapshot)
	})
	failedSeed := h.members("c")
	if len(failedSeed) != 1 {
		t.Fatalf("members during the failed restore: %d", len(failedSeed))
	}
	consentTo("good")
	h.run("recovered", func() bool {
		r := h.recovery("c")
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted && r.Snapshot == "good" && h.converged("c", 3)()
	})
	if h.memberNamed(failedSeed[0].Name) != nil {
		t.Error("the failed seed was not retired")
	}
}
