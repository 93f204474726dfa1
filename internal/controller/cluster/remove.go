package cluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// removeLeaving removes deleted EtcdMembers from etcd, then releases their
// finalizer. Whoever deleted them (a scale down, a repair, a user), each
// removal is projected against the membership as it is now; one that would
// break quorum waits and lets the other candidates go on.
func (r *Reconciler) removeLeaving(ctx context.Context, w *world) (*ctrl.Result, error) {
	for _, m := range newest(w.leaving()) {
		if !controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) {
			continue
		}
		em := w.etcdMemberOf(m)
		if em == nil {
			// Never added, or already removed: nothing to change in etcd.
			if err := r.release(ctx, w, m, "it is not a member of etcd"); err != nil {
				return nil, err
			}
			continue
		}
		if res, err := r.removeMember(ctx, w, m, *em); res != nil || err != nil {
			return res, err
		}
	}
	return nil, nil
}

// removeMember removes one leaving member: its Pod first stops serving
// clients (role label off), a leader hands over its leadership, then etcd
// removes it and the EtcdMember is released. Each step is idempotent, so a
// crash between any two is finished by the next pass.
func (r *Reconciler) removeMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember, em etcd.Member) (*ctrl.Result, error) {
	if d := quorum.Remove(w.voters(), m.Name); !d.OK {
		if lastOfAll(w, m) {
			// The user deleted every member: the last one takes the
			// cluster's membership (and data) with it.
			return nil, r.release(ctx, w, m, "it is the last member of the cluster; its data goes with it")
		}
		r.refuse(w, fmt.Sprintf("removing deleted member %s waits: %s", m.Name, d.Reason), m)
		return nil, nil
	}
	w.working(conditions.ReasonScalingDown, fmt.Sprintf("Removing member %s from etcd", m.Name))
	if err := r.stopServing(ctx, m); err != nil {
		return nil, err
	}
	if !em.IsLearner {
		if res, err := r.handOverLeadership(ctx, w, m, em); res != nil || err != nil {
			return res, err
		}
	}
	err := r.withClient(ctx, w, others(w, m), func(ctx context.Context, c etcd.Client) error { return c.MemberRemove(ctx, em.ID) })
	r.Metrics.MembershipOp(w.cluster, "remove", err)
	if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		return r.retryable(ctx, w, "removing "+m.Name+" from etcd", err)
	}
	r.event(w.cluster, false, "MemberRemoved", "RemoveMember", "Removed member %s (%s) from etcd", m.Name, etcd.FormatID(em.ID))
	r.event(m, false, "MemberRemoved", "RemoveMember", "Removed from etcd")
	logf(ctx, w)("Removed member from etcd", "member", m.Name, "memberID", etcd.FormatID(em.ID))
	if err := r.release(ctx, w, m, ""); err != nil {
		return nil, err
	}
	// etcd changed under no watch; etcd also wants its voters connected
	// for a while before the next change.
	return stop(etcdRetry), nil
}

// lastOfAll reports whether m is the only member left and every member is
// being deleted.
func lastOfAll(w *world, m *v1alpha2.EtcdMember) bool {
	for _, o := range w.members {
		if o != m && (!deleting(o) || controllerutil.ContainsFinalizer(o, manifest.MemberFinalizer)) {
			return false
		}
	}
	return true
}

// others are the members to send a change about m through.
func others(w *world, m *v1alpha2.EtcdMember) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, o := range w.endpoints() {
		if o != m {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// stopServing takes the role label off the member's Pod, so that the client
// Service and the PodDisruptionBudget stop counting it before it leaves.
func (r *Reconciler) stopServing(ctx context.Context, m *v1alpha2.EtcdMember) error {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, pod)
	if apierrors.IsNotFound(err) || (err == nil && pod.Labels[manifest.LabelRole] == "") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod of %s: %w", m.Name, err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	delete(pod.Labels, manifest.LabelRole)
	if err := r.Client.Patch(ctx, pod, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("taking the role label off pod %s: %w", pod.Name, err)
	}
	return nil
}

// handOverLeadership moves etcd's leadership away from a voter about to be
// removed, so that its removal costs no election: the leader hands over to a
// healthy voter that stays, through a client of the leader alone.
func (r *Reconciler) handOverLeadership(ctx context.Context, w *world, m *v1alpha2.EtcdMember, em etcd.Member) (*ctrl.Result, error) {
	if m.Status.PodName == "" || !ready(m) {
		return nil, nil
	}
	st, err := r.status(ctx, w, m)
	if err != nil || st.Leader != em.ID {
		// Not the leader (or not answering, so not leading anyone).
		return nil, nil
	}
	to := transferee(w, m)
	if to == nil {
		return nil, nil
	}
	target := w.etcdMemberOf(to)
	err = r.withClient(ctx, w, []*v1alpha2.EtcdMember{m}, func(ctx context.Context, c etcd.Client) error {
		return c.MoveLeader(ctx, target.ID)
	})
	r.Metrics.MembershipOp(w.cluster, "move-leader", err)
	if err != nil {
		return r.retryable(ctx, w, "moving leadership from "+m.Name+" to "+to.Name, err)
	}
	r.event(w.cluster, false, "LeadershipMoved", "MoveLeader", "Moved leadership from %s to %s before removing %s", m.Name, to.Name, m.Name)
	return nil, nil
}

// transferee is a healthy voter that stays, preferring the oldest member.
func transferee(w *world, leaving *v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	ms := newest(w.running())
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if m != leaving && healthy(m) && w.isVoter(m) && m.Status.PodName != "" {
			return m
		}
	}
	return nil
}

// release drops the member's finalizer: etcd no longer lists it, so the
// EtcdMember, its Pod and its PVC may go.
func (r *Reconciler) release(ctx context.Context, w *world, m *v1alpha2.EtcdMember, why string) error {
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, manifest.MemberFinalizer)
	if err := r.Client.Patch(ctx, m, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing member %s: %w", m.Name, err)
	}
	if why != "" {
		logf(ctx, w)("Released member without changing etcd", "member", m.Name, "why", why)
	}
	return nil
}

// removeStrays removes etcd members no EtcdMember accounts for: a learner
// added just before its EtcdMember was deleted, say. One per pass, quorum
// first.
func (r *Reconciler) removeStrays(ctx context.Context, w *world) (*ctrl.Result, error) {
	for _, em := range w.etcdMembers.Members {
		if w.memberOf(em) != nil {
			continue
		}
		name := strangerName(em)
		if d := quorum.Remove(w.voters(), name); !d.OK {
			r.refuse(w, fmt.Sprintf("removing etcd member %s that no EtcdMember accounts for waits: %s", name, d.Reason))
			continue
		}
		err := r.withClient(ctx, w, nil, func(ctx context.Context, c etcd.Client) error { return c.MemberRemove(ctx, em.ID) })
		r.Metrics.MembershipOp(w.cluster, "remove", err)
		if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
			return r.retryable(ctx, w, "removing stray etcd member "+name, err)
		}
		r.event(w.cluster, false, conditions.ReasonRemovingStray, "RemoveMember", "Removed etcd member %s (%v) that no EtcdMember accounts for", name, em.PeerURLs)
		// etcd changed under no watch: look again at once.
		return stop(etcdRetry), nil
	}
	return nil, nil
}
