package cluster

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// scale moves the number of running members one step towards the target:
// wake a dormant member or add one learner when short, pause or remove one
// member when over.
func (r *Reconciler) scale(ctx context.Context, w *world) (*ctrl.Result, error) {
	if terminal(w) {
		return done(), nil
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
		if !ready(m) || !m.Status.IsVoter {
			w.working(conditions.ReasonWaitingForMembers, fmt.Sprintf("Waiting for member %s to be a ready voter before adding the next", m.Name))
			return done(), nil
		}
	}
	if w.etcdMembers == nil {
		w.working(conditions.ReasonWaitingForMembers, "Waiting for a running member to add the next one through")
		return done(), nil
	}
	m, err := r.createMember(ctx, w, false)
	if err != nil {
		return nil, err
	}
	return r.joinMember(ctx, w, m)
}

func (r *Reconciler) shrink(ctx context.Context, w *world) (*ctrl.Result, error) {
	running := w.running()
	if w.desired() == 0 && len(running) == 1 {
		return r.setDormant(ctx, w, running[0], true)
	}
	victim := chooseVictim(w)
	if d := quorum.Remove(w.voters(), victim.Name); !d.OK {
		return r.refuse(w, d.Reason)
	}
	w.working(conditions.ReasonScalingDown, fmt.Sprintf("Removing member %s", victim.Name))
	return r.deleteMember(ctx, w, victim, "MemberRemoved", "Removing member "+victim.Name+" to scale down")
}

// deleteMember deletes an EtcdMember; its finalizer removes it from etcd.
func (r *Reconciler) deleteMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember, reason, message string) (*ctrl.Result, error) {
	if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("deleting member %s: %w", m.Name, err)
	}
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
		case !m.Status.IsVoter:
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

// replaceLost removes a member that cannot come back as itself (tmpfs Pod
// gone, data directory lost, node gone), when quorum allows; scaling then adds
// a fresh member in its place.
func (r *Reconciler) replaceLost(ctx context.Context, w *world) (*ctrl.Result, error) {
	if terminal(w) {
		return nil, nil
	}
	for _, m := range w.running() {
		if !lost(m) {
			continue
		}
		if d := quorum.Remove(w.voters(), m.Name); !d.OK {
			return r.refuse(w, d.Reason)
		}
		w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing lost member %s", m.Name))
		why := conditions.Get(m.Status.Conditions, conditions.Lost)
		return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
			fmt.Sprintf("Removing lost member %s to replace it (%s: %s)", m.Name, why.Reason, why.Message))
	}
	return nil, nil
}

// replaceStaleJoiner removes a member made for an earlier target that never
// joined (unschedulable, say). Members are never re-templated, so it would
// wait forever; the scale step then adds one from the current target.
func (r *Reconciler) replaceStaleJoiner(ctx context.Context, w *world) (*ctrl.Result, error) {
	m := staleJoiner(w)
	if m == nil || terminal(w) {
		return nil, nil
	}
	w.working(conditions.ReasonReplacingMember, fmt.Sprintf("Replacing member %s, which never joined and was made for an earlier target", m.Name))
	return r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
		fmt.Sprintf("Removing member %s: it never became a ready voter and the target changed since it was made", m.Name))
}

// staleJoiner finds a member that never became a ready voter and whose
// template no longer matches the latched target.
func staleJoiner(w *world) *v1alpha2.EtcdMember {
	o := w.cluster.Status.Observed
	for _, m := range w.running() {
		if m.Status.IsVoter || ready(m) {
			continue
		}
		s := m.Spec
		if s.Version != o.Version || s.Storage.Size.Cmp(o.Storage.Size) != 0 ||
			!equality.Semantic.DeepEqual(s.Affinity, o.Affinity) ||
			!equality.Semantic.DeepEqual(s.TopologySpreadConstraints, o.TopologySpreadConstraints) ||
			!equality.Semantic.DeepEqual(s.Resources, o.Resources) ||
			!equality.Semantic.DeepEqual(s.ImagePullSecrets, o.ImagePullSecrets) ||
			!equality.Semantic.DeepEqual(s.Options, o.Options) {
			return m
		}
	}
	return nil
}
