package cluster

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The actions of removal (remove.go, scale.go and repair.go plan them): a
// member out of etcd, its EtcdMember released or deleted, a stray member
// of etcd removed.

// removeFromEtcd removes one leaving member: a leader hands over its
// leadership, then etcd removes it, its Pod is deleted and the EtcdMember is
// released.
//
// The Pod keeps its role label to the end: its deletion takes it out of the
// client Service (a terminating Pod is no endpoint) and the budget counts a
// deleted voter as unavailable already (budgetCounts). Taking the label off
// first bought nothing, the endpoint update trailing the removal anyway, and
// cost the scale-down half a second a Pod on average: the write made the
// Pod's kubelet sync it just before the deletion arrived, and a kubelet
// starts a termination only once it has looked at the containers after its
// last sync (its relist, once a second).
func (r *Reconciler) removeFromEtcd(ctx context.Context, w *world, c *change) outcome {
	m := c.member
	if o, ok := r.handOver(ctx, w, m, c.handOver); !ok {
		return o
	}
	err := r.withClient(ctx, w, others(w, m), func(ctx context.Context, cl etcd.Client) error { return cl.MemberRemove(ctx, c.etcdID) })
	r.Metrics.MembershipOp(w.cluster, "remove", err)
	if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		return r.etcdFailed(ctx, w, "removing "+m.Name+" from etcd", err)
	}
	r.expect.removedFromEtcd(m.UID, w.now)
	r.event(w.cluster, false, "MemberRemoved", "RemoveMember", "Removed member %s (%s) from etcd", m.Name, etcd.FormatID(c.etcdID))
	r.event(m, false, "MemberRemoved", "RemoveMember", "Removed from etcd")
	logf(ctx, w)("Removed member from etcd", "member", m.Name, "memberID", etcd.FormatID(c.etcdID))
	r.stopPod(ctx, w, m)
	if err := r.release(ctx, w, m, ""); err != nil {
		return outcome{err: err}
	}
	// etcd changed under no watch; etcd also wants its voters connected
	// for a while before the next change. (A refusal asks to come back
	// at the same time: removed tells the two apart.)
	return outcome{requeue: etcdRetry, removed: m}
}

// stopPod deletes the Pod of a member etcd no longer lists, at once: the
// garbage collector would delete it only after the EtcdMember is gone, a
// second or more later on a busy control plane, and scaling down is done
// when the Pods are. Best effort: the garbage collector still follows.
func (r *Reconciler) stopPod(ctx context.Context, w *world, m *v1alpha2.EtcdMember) {
	pod := w.pods[m.Name]
	if pod == nil || pod.DeletionTimestamp != nil {
		return
	}
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		logf(ctx, w)("Could not delete the Pod of a removed member; the garbage collector will", "member", m.Name, "error", err.Error())
	}
}

// others are the members to send a change about m through.
func others(w *world, m *v1alpha2.EtcdMember) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, o := range dialVoters(w) {
		if o != m {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// handOver moves etcd's leadership from m to the transferee, when m leads,
// through a client of m alone (etcd takes it only from the leader). It
// reports false with the outcome when the pass must stop.
func (r *Reconciler) handOver(ctx context.Context, w *world, m, to *v1alpha2.EtcdMember) (outcome, bool) {
	if to == nil {
		return outcome{}, true
	}
	target := w.etcdMemberOf(to)
	if target == nil {
		return outcome{}, true
	}
	err := r.withClient(ctx, w, []*v1alpha2.EtcdMember{m}, func(ctx context.Context, c etcd.Client) error {
		return c.MoveLeader(ctx, target.ID)
	})
	r.Metrics.MembershipOp(w.cluster, "move-leader", err)
	if err != nil {
		return r.etcdFailed(ctx, w, "moving leadership from "+m.Name+" to "+to.Name, err), false
	}
	r.event(w.cluster, false, "LeadershipMoved", "MoveLeader", "Moved leadership from %s to %s", m.Name, to.Name)
	return outcome{}, true
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

// removeStray removes an etcd member no EtcdMember accounts for.
func (r *Reconciler) removeStray(ctx context.Context, w *world, c *change) outcome {
	err := r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error { return cl.MemberRemove(ctx, c.etcdID) })
	r.Metrics.MembershipOp(w.cluster, "remove", err)
	if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		return r.etcdFailed(ctx, w, "removing stray etcd member "+c.message, err)
	}
	r.event(w.cluster, false, conditions.ReasonRemovingStray, "RemoveMember", "Removed etcd member %s that no EtcdMember accounts for", c.message)
	// etcd changed under no watch: look again at once.
	return outcome{requeue: etcdRetry}
}

// deleteAndRemove deletes the member (a move apart records itself first,
// spread.go) and, when the change says so (a scale-down), removes it from
// etcd in the same pass. A removal etcd made of
// a member that did not lead lets the pass go on to the next (see goOn).
func (r *Reconciler) deleteAndRemove(ctx context.Context, w *world, c *change) outcome {
	if c.kind == moveApart {
		return outcome{err: r.moveMemberApart(ctx, w, c)}
	}
	if err := r.deleteMember(ctx, w, c.member, c.reason, c.message); err != nil || !c.thenRemove {
		return outcome{err: err}
	}
	o := r.removeFromEtcd(ctx, w, c)
	if c.handOver != nil || w.leaderMember() == c.member {
		o.removed = nil
	}
	return o
}

// deleteMember deletes an EtcdMember the operator gives up; a later pass
// removes it from etcd (removeFromEtcd) and releases its finalizer.
func (r *Reconciler) deleteMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember, reason, message string) error {
	// Its Pod is left as it is (see removeFromEtcd): the budget counts
	// a deleted voter as unavailable from here on.
	if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting member %s: %w", m.Name, err)
	}
	// The rest of the pass (the budget) sees it leaving, as the API does.
	now := metav1.NewTime(w.now)
	m.DeletionTimestamp = &now
	r.expect.deleted(client.ObjectKeyFromObject(w.cluster).String(), m.Name, w.now)
	r.event(w.cluster, false, reason, "DeleteMember", "%s", message)
	logf(ctx, w)("Deleting member", "member", m.Name, "reason", reason)
	return nil
}
