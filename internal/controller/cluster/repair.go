package cluster

import (
	"fmt"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// retireLost deletes a member that cannot come back as itself (tmpfs Pod
// gone, data directory or claim lost, node gone, removed from etcd by
// someone else) when etcd may lose it: learners first, then voters whose
// removal keeps quorum. Its removal from etcd follows (removeLeaving), and
// scaling adds a fresh member in its place.
func (pl *planner) retireLost() bool {
	w := pl.w
	if w.etcd.list == nil {
		return false
	}
	if m := removedOutside(w); m != nil {
		pl.working(conditions.ReasonReplacingMember, "Replacing member %s, which etcd no longer lists", m.Name)
		return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember, message: fmt.Sprintf(
			"Removing member %s to replace it: etcd no longer lists it (it was removed from etcd outside the operator) and it can never rejoin as itself", m.Name)})
	}
	if m := claimGoing(w); m != nil {
		pl.working(conditions.ReasonReplacingMember, "Replacing member %s, whose claim is being deleted", m.Name)
		return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember, message: fmt.Sprintf(
			"Replacing member %s: its claim %s is being deleted. It keeps serving and voting on the volume its Pod holds until its replacement is a healthy voter",
			m.Name, manifest.PVCName(m.Name))})
	}
	for _, m := range lostFirstLearners(w) {
		if em := w.etcdMemberOf(m); em != nil && !em.IsLearner {
			if d := quorum.Remove(w.voters(), m.Name); !d.OK {
				pl.refuse(m, "replacing lost member %s waits: %s", m.Name, d.Reason)
				continue
			}
		}
		pl.working(conditions.ReasonReplacingMember, "Replacing lost member %s", m.Name)
		why := conditions.Get(m.Status.Conditions, conditions.Lost)
		return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember,
			message: fmt.Sprintf("Removing lost member %s to replace it (%s: %s)", m.Name, why.Reason, why.Message)})
	}
	return false
}

// claimGoing finds a running member, not lost, whose claim is being
// deleted while its Pod still holds it. Deleting the member (not marking it
// lost) keeps it in every quorum projection while it serves: it leaves
// etcd only once its replacement is a healthy voter, as any deleted member.
func claimGoing(w *world) *v1alpha2.EtcdMember {
	for _, m := range w.running() {
		if w.claimsGoing[m.Name] && !lost(m) && w.pods[m.Name] != nil {
			return m
		}
	}
	return nil
}

// removedOutside finds a running member that joined etcd (it has its
// initialCluster) but that etcd no longer lists: someone removed it with
// etcdctl, say. etcd refuses it for good; it is replaced like a lost member.
func removedOutside(w *world) *v1alpha2.EtcdMember {
	for _, m := range w.running() {
		if m.Spec.InitialCluster != "" && w.etcdMemberOf(m) == nil {
			return m
		}
	}
	return nil
}

// lostFirstLearners lists the running lost members, those etcd does not count
// as voters first.
func lostFirstLearners(w *world) []*v1alpha2.EtcdMember {
	var learners, voters []*v1alpha2.EtcdMember
	for _, m := range w.running() {
		switch {
		case !lost(m):
		case w.isVoter(m):
			voters = append(voters, m)
		default:
			learners = append(learners, m)
		}
	}
	return append(learners, voters...)
}

// retireStuckJoiners deletes members that will not join as they are: made
// for an earlier target and not a voter (members are never re-templated
// before they joined), or never started within the progress deadline
// (unschedulable, a claim that never binds). Such a member may hold etcd's
// single learner slot; a fresh one from the current target takes its place.
func (pl *planner) retireStuckJoiners() bool {
	w := pl.w
	if w.etcd.list == nil {
		return false
	}
	join := joinTarget(w)
	for _, m := range w.running() {
		if w.isVoter(m) || w.healthy(m) || (m.Spec.Bootstrap && w.cluster.Status.ClusterID == "") {
			continue
		}
		if !manifest.UpToDate(m, join) {
			pl.working(conditions.ReasonReplacingMember, "Replacing member %s, which never joined and was made for an earlier target", m.Name)
			return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember,
				message: fmt.Sprintf("Removing member %s: it never became a ready voter and the target changed since it was made", m.Name)})
		}
		limit := time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second
		if m.Status.MemberID == "" && !w.now.Before(m.CreationTimestamp.Add(limit)) {
			pl.working(conditions.ReasonReplacingMember, "Replacing member %s, which did not start within %s", m.Name, limit)
			why := "no reason reported"
			if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil {
				why = c.Message
			}
			return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember,
				message: fmt.Sprintf("Removing member %s: it did not start within %s (%s)", m.Name, limit, why)})
		}
	}
	return false
}

// joinDeadline is when a member that has not started yet is given up, for
// the requeue timer.
func joinDeadline(w *world) *time.Duration {
	var next *time.Duration
	limit := time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second
	for _, m := range w.running() {
		if m.Status.MemberID != "" || w.isVoter(m) || m.Spec.Bootstrap {
			continue
		}
		d := max(m.CreationTimestamp.Add(limit).Sub(w.now), 0)
		if next == nil || d < *next {
			next = &d
		}
	}
	return next
}
