package cluster

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// retireLost deletes a member that cannot come back as itself (tmpfs Pod
// gone, data directory or claim lost, node gone) when etcd may lose it:
// learners first, then voters whose removal keeps quorum. Its removal from
// etcd follows (removeLeaving), and scaling adds a fresh member in its place.
func (r *Reconciler) retireLost(ctx context.Context, w *world) (*ctrl.Result, error) {
	if m := removedOutside(w); m != nil {
		w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing member %s, which etcd no longer lists", m.Name))
		return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
			fmt.Sprintf("Removing member %s to replace it: etcd no longer lists it (it was removed from etcd outside the operator) and it can never rejoin as itself", m.Name))
	}
	for _, m := range lostFirstLearners(w) {
		if em := w.etcdMemberOf(m); em != nil && !em.IsLearner {
			if d := quorum.Remove(w.voters(), m.Name); !d.OK {
				r.refuse(w, fmt.Sprintf("replacing lost member %s waits: %s", m.Name, d.Reason))
				continue
			}
		}
		w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing lost member %s", m.Name))
		why := conditions.Get(m.Status.Conditions, conditions.Lost)
		return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
			fmt.Sprintf("Removing lost member %s to replace it (%s: %s)", m.Name, why.Reason, why.Message))
	}
	return nil, nil
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
// for an earlier target and not ready (members are never re-templated), or
// never started within the progress deadline (unschedulable, a claim that
// never binds). Such a member may hold etcd's single learner slot; a fresh
// one from the current target takes its place.
func (r *Reconciler) retireStuckJoiners(ctx context.Context, w *world) (*ctrl.Result, error) {
	for _, m := range w.running() {
		if w.isVoter(m) || ready(m) || (m.Spec.Bootstrap && w.cluster.Status.ClusterID == "") {
			continue
		}
		if !manifest.UpToDate(m, w.cluster.Status.Observed) {
			w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing member %s, which never joined and was made for an earlier target", m.Name))
			return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
				fmt.Sprintf("Removing member %s: it never became a ready voter and the target changed since it was made", m.Name))
		}
		limit := time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second
		if m.Status.MemberID == "" && !w.now.Before(m.CreationTimestamp.Add(limit)) {
			w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing member %s, which did not start within %s", m.Name, limit))
			why := "no reason reported"
			if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil {
				why = c.Message
			}
			return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
				fmt.Sprintf("Removing member %s: it did not start within %s (%s)", m.Name, limit, why))
		}
	}
	return nil, nil
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
