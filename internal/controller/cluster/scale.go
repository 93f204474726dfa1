package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// scale moves the number of running members one step towards the target:
// wake a dormant member or add one learner when short, pause or remove one
// member when over. A cluster that has not formed is the bootstrap's.
func (r *Reconciler) scale(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.cluster.Status.ClusterID == "" {
		return nil, nil
	}
	running, desired := len(w.running()), w.desired()
	switch {
	case running < desired:
		return r.grow(ctx, w)
	case running > desired:
		return r.shrink(ctx, w)
	}
	return nil, nil
}

func (r *Reconciler) grow(ctx context.Context, w *world) (*ctrl.Result, error) {
	if dormant := w.dormant(); len(dormant) > 0 {
		return r.setDormant(ctx, w, dormant[0], false)
	}
	for _, m := range w.running() {
		if !ready(m) || !w.isVoter(m) {
			w.working(conditions.ReasonWaitingForMembers, fmt.Sprintf("Waiting for member %s to be a ready voter before adding the next", m.Name))
			return done(), nil
		}
	}
	if w.etcdMembers == nil {
		w.working(conditions.ReasonWaitingForMembers, "Waiting for a running member to add the next one through")
		return done(), nil
	}
	if l := w.learner(); l != nil {
		w.working(conditions.ReasonWaitingForMembers, fmt.Sprintf("Waiting for etcd's learner %s to be promoted or removed", strangerName(*l)))
		return done(), nil
	}
	if len(w.pending()) > 0 {
		// One joining at a time; its add is under way.
		return done(), nil
	}
	if d := quorum.AddLearner(w.voters()); !d.OK {
		r.refuse(w, d.Reason)
		return done(), nil
	}
	m, err := r.createMember(ctx, w, false)
	if err != nil {
		return nil, err
	}
	if err := r.prepareJoin(ctx, w, m); err != nil {
		return nil, err
	}
	if res, err := r.addPending(ctx, w); res != nil || err != nil {
		return res, err
	}
	return done(), nil
}

func (r *Reconciler) shrink(ctx context.Context, w *world) (*ctrl.Result, error) {
	if leaving := w.leaving(); len(leaving) > 0 {
		// One removal at a time: the next victim waits for this one.
		w.working(conditions.ReasonScalingDown, fmt.Sprintf("Waiting for member %s to leave", leaving[0].Name))
		return done(), nil
	}
	running := w.running()
	if w.desired() == 0 && len(running) == 1 {
		return r.setDormant(ctx, w, running[0], true)
	}
	victim := chooseVictim(w)
	if w.isVoter(victim) {
		if d := quorum.Remove(w.voters(), victim.Name); !d.OK {
			r.refuse(w, fmt.Sprintf("scaling down waits: %s", d.Reason))
			return done(), nil
		}
	}
	w.working(conditions.ReasonScalingDown, fmt.Sprintf("Removing member %s", victim.Name))
	return r.deleteMember(ctx, w, victim, "MemberRemoved", "Removing member "+victim.Name+" to scale down")
}

// deleteMember deletes an EtcdMember the operator gives up; the next pass
// removes it from etcd (removeLeaving) and releases its finalizer.
func (r *Reconciler) deleteMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember, reason, message string) (*ctrl.Result, error) {
	// First out of the client Service and the budget: were the operator to
	// stop right after the deletion, the budget must not count the member.
	if err := r.stopServing(ctx, m); err != nil {
		return nil, err
	}
	if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("deleting member %s: %w", m.Name, err)
	}
	// The rest of the pass (the budget) sees it leaving, as the API does.
	now := metav1.NewTime(w.now)
	m.DeletionTimestamp = &now
	r.expect.deleted(client.ObjectKeyFromObject(w.cluster).String(), m.Name, w.now)
	r.event(w.cluster, false, reason, "DeleteMember", "%s", message)
	logf(ctx, w)("Deleting member", "member", m.Name, "reason", reason)
	return done(), nil
}

// chooseVictim picks the member to remove: one etcd does not count yet
// (pending, learner), then a lost or unready one, then the newest.
func chooseVictim(w *world) *v1alpha2.EtcdMember {
	ordered := newest(w.running())
	rank := func(m *v1alpha2.EtcdMember) int {
		switch {
		case m.Spec.InitialCluster == "":
			return 0
		case !w.isVoter(m):
			return 1
		case lost(m):
			return 2
		case !ready(m):
			return 3
		}
		return 4
	}
	best := ordered[0]
	for _, m := range ordered[1:] {
		if rank(m) < rank(best) {
			best = m
		}
	}
	return best
}

// setDormant pauses or wakes a member: a dormant member has no Pod but keeps
// its volume and identity, so waking it resumes the same etcd member.
func (r *Reconciler) setDormant(ctx context.Context, w *world, m *v1alpha2.EtcdMember, dormant bool) (*ctrl.Result, error) {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.Dormant = dormant
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return nil, fmt.Errorf("setting dormant=%t on %s: %w", dormant, m.Name, err)
	}
	if dormant {
		w.working(conditions.ReasonPausing, "Pausing: member "+m.Name+" goes dormant")
		r.event(w.cluster, false, conditions.ReasonPaused, "Pause", "Paused the cluster: member %s is dormant, its volume is kept", m.Name)
	} else {
		w.working(conditions.ReasonResuming, "Resuming dormant member "+m.Name)
		r.event(w.cluster, false, conditions.ReasonResuming, "Resume", "Resuming dormant member %s", m.Name)
	}
	return done(), nil
}
