package cluster

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// Every change of etcd's membership is made by the cluster controller, at
// most one per pass; the member controller never changes it. A pass of one
// cluster never runs concurrently with another pass of the same cluster (the
// controller's work queue guarantees it, and leader election keeps a single
// operator active), and each pass reads etcd's membership afresh before it
// decides. So whoever triggers a change (a scale, a repair, a user deleting
// several EtcdMembers at once) it is projected against the membership the
// previous change left.
//
// Deleting EtcdMembers asks for replacements, never for fewer members than
// the EtcdCluster wants: a deleted member that still serves stays in etcd
// until the members that are not deleted make the target again (the scale
// stage grows the cluster meanwhile), then leaves; one that does not serve
// (lost, down) leaves at once, quorum permitting. Its Pod keeps running and
// its claim stays until it has left etcd.

// removeLeaving removes deleted EtcdMembers from etcd, then releases their
// finalizer, newest first. One that must wait lets the other candidates go
// on.
func (pl *planner) removeLeaving() bool {
	w := pl.w
	if w.etcd.list == nil {
		// Without etcd's membership nothing says a deleted member left it:
		// its finalizer (and with it its volume) stays.
		return false
	}
	for _, m := range newest(w.leaving()) {
		if !controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) {
			continue
		}
		em := w.etcdMemberOf(m)
		if em == nil {
			// Never added, or already removed: nothing to change in etcd.
			return pl.choose(&change{kind: release, member: m, message: "it is not a member of etcd"})
		}
		if why := pl.mustStay(m); why != "" {
			pl.working(conditions.ReasonReplacingMember, "%s", why)
			continue
		}
		if d := quorum.Remove(w.voters(), m.Name); !d.OK {
			pl.refuse(m, "removing deleted member %s waits: %s", m.Name, d.Reason)
			continue
		}
		pl.working(conditions.ReasonScalingDown, "Removing member %s from etcd", m.Name)
		return pl.choose(withRemoval(w, &change{kind: removeFromEtcd, member: m}, em))
	}
	return false
}

// mustStay says why a deleted member that still serves keeps its place in
// etcd: the members that are not deleted are fewer than the target, so its
// departure would shrink the cluster below what the EtcdCluster asks for.
func (pl *planner) mustStay(m *v1alpha2.EtcdMember) string {
	w := pl.w
	if !w.isVoter(m) || !w.healthy(m) {
		// A learner serves nobody, and a member that does not serve is
		// replaced once it is gone.
		return ""
	}
	staying := 0
	for _, o := range w.running() {
		if w.isVoter(o) && w.healthy(o) {
			staying++
		}
	}
	if staying >= w.desired() {
		return ""
	}
	return fmt.Sprintf("Member %s was deleted; it serves until a replacement has joined (%d of %d members that stay are ready voters)",
		m.Name, staying, w.desired())
}

// withRemoval fills in what removing the change's member from etcd needs:
// its etcd ID, and, for the leader, the voter it hands over to first.
func withRemoval(w *world, c *change, em *etcd.Member) *change {
	c.etcdID = em.ID
	if !em.IsLearner && w.leaderMember() == c.member {
		c.handOver = transferee(w, c.member)
	}
	return c
}

// transferee is a healthy voter that stays, preferring the oldest member.
func transferee(w *world, leaving *v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	ms := newest(w.running())
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if m != leaving && w.isVoter(m) && w.serves(m) {
			return m
		}
	}
	return nil
}

// removeStrays removes etcd members no EtcdMember accounts for: a learner
// added just before its EtcdMember was deleted, say. One per pass, quorum
// first.
func (pl *planner) removeStrays() bool {
	w := pl.w
	if w.etcd.list == nil {
		return false
	}
	for _, em := range w.etcd.list.Members {
		if w.memberOf(em) != nil {
			continue
		}
		name := strangerName(em)
		if d := quorum.Remove(w.voters(), name); !d.OK {
			pl.refuse(nil, "removing etcd member %s that no EtcdMember accounts for waits: %s", name, d.Reason)
			continue
		}
		pl.working(conditions.ReasonRemovingStray, "Removing etcd member %s that no EtcdMember accounts for", name)
		return pl.choose(&change{kind: removeStray, etcdID: em.ID, message: fmt.Sprintf("%s (%v)", name, em.PeerURLs)})
	}
	return false
}
