package cluster

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The maintenance lock (status.maintenanceLock) makes a member's
// defragmentation and the cluster's membership changes and member restarts
// mutually exclusive. A Defragment call blocks its member for up to
// minutes while etcd rewrites its backend; a restart or a membership
// change counted on that member would then cost the quorum. The cluster
// controller is the lock's only writer, so the exclusion rests on its
// passes being serialised per cluster:
//
//   - an EtcdDefrag asks for the lock by naming the member in its
//     status.defragmenting (the defrag controller writes it, before it
//     calls Defragment and only then);
//   - a pass grants it only when it makes no change and the cluster is at
//     rest (Progressing=Reconciled), and writes the grant before the defrag
//     controller, which reads the cluster fresh, may call Defragment;
//   - while it is held, no pass makes a disruptive change (heldBack);
//   - it ends when the run withdraws or finishes its request, or when it
//     expires (lockLifetime), even if the run is gone: the Defragment call
//     of a run deleted meanwhile may still be in progress.
//
// A request is granted only while it is fresh (requestWindow), so a run
// that died holding the lock is not granted it again once it expired; a
// live run asks again with a new time.

// requestWindow is how long a request may wait for its grant: a run that
// waits longer asks again (with a new time), so a request left by a run
// that died is not granted again after its lock expired.
const requestWindow = time.Minute

// lockLifetime bounds a grant: the defrag controller's longest Defragment
// call (5m; it starts none with less left) and a minute to spare to see
// the grant. After it, a member still blocked (etcd does not stop a
// defragmentation its client gave up on) is judged by etcd's own health,
// read fresh, as every member is before a change.
const lockLifetime = 6 * time.Minute

// readDefrags reads, from the cache, the EtcdDefrags that name the
// cluster: their requests for the lock. An error leaves none, which holds
// a granted lock until it expires and grants none.
func (r *Reconciler) readDefrags(ctx context.Context, w *world) {
	list := &v1alpha2.EtcdDefragList{}
	if err := r.Client.List(ctx, list, client.InNamespace(w.cluster.Namespace)); err != nil {
		log.FromContext(ctx).Info("Listing the EtcdDefrags failed; the maintenance lock is granted to none this pass", "error", err.Error())
		w.defragsUnknown = true
		return
	}
	for i := range list.Items {
		if d := &list.Items[i]; d.Spec.ClusterRef.Name == w.cluster.Name {
			w.defrags = append(w.defrags, d)
		}
	}
}

// clusterOfDefrag maps an EtcdDefrag to its cluster: its request for the
// maintenance lock, and its end, are answered at once.
func clusterOfDefrag(_ context.Context, o client.Object) []reconcile.Request {
	d, ok := o.(*v1alpha2.EtcdDefrag)
	if !ok || d.Spec.ClusterRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: d.Namespace, Name: d.Spec.ClusterRef.Name}}}
}

func defragFinished(d *v1alpha2.EtcdDefrag) bool {
	return d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed
}

// defragNamed is the cluster's run of that name, nil when it is gone.
func (w *world) defragNamed(name string) *v1alpha2.EtcdDefrag {
	for _, d := range w.defrags {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// asks reports whether the run's request is the one the lock answers.
func asks(d *v1alpha2.EtcdDefrag, l *v1alpha2.MaintenanceLock) bool {
	req := d.Status.Defragmenting
	return req != nil && !defragFinished(d) && req.Member == l.Member && req.Since.Equal(&l.RequestedAt)
}

// heldLock is the lock in force in this pass, or nil: recorded, not
// expired, and either its run still asks for it or the run is gone (its
// call may still be in progress; the lock expires).
func heldLock(w *world) *v1alpha2.MaintenanceLock {
	l := w.cluster.Status.MaintenanceLock
	if l == nil || !w.now.Before(l.ExpiresAt.Time) {
		return nil
	}
	if d := w.defragNamed(l.Holder); d != nil && !w.defragsUnknown && !asks(d, l) {
		return nil
	}
	return l
}

// disruptive: the change blocks, stops or restarts a member, or changes
// etcd's voting membership. Creating a member etcd does not know yet,
// recording facts and latching targets are not.
func disruptive(k changeKind) bool {
	switch k {
	case addLearner, promote, removeFromEtcd, removeStray, deleteMember, setDormant, restart, forceNewCluster, fence, discard, moveApart:
		return true
	}
	return false
}

// heldBack takes a disruptive change out of the plan while the lock is
// held, saying what waits for which member. The change comes back in the
// first pass after the lock ended; the timer is its expiry.
func (pl *planner) heldBack() {
	c, l := pl.p.change, heldLock(pl.w)
	if c == nil || l == nil || !disruptive(c.kind) {
		return
	}
	what := c.kind.String()
	if c.member != nil {
		what += " of member " + c.member.Name
	}
	pl.p.change = nil
	pl.working(conditions.ReasonWaitingForDefrag, "Holding %s: member %s is being defragmented by EtcdDefrag %s (maintenance lock granted %s, expires %s)",
		what, l.Member, l.Holder, l.GrantedAt.UTC().Format(time.RFC3339), l.ExpiresAt.UTC().Format(time.RFC3339))
	pl.p.requeue = l.ExpiresAt.Sub(pl.w.now)
}

// lockRequest is the request the cluster may grant: of the unfinished runs
// that name a running member and asked less than requestWindow ago, the
// oldest.
func lockRequest(w *world) *v1alpha2.EtcdDefrag {
	var pick *v1alpha2.EtcdDefrag
	for _, d := range w.defrags {
		req := d.Status.Defragmenting
		if req == nil || defragFinished(d) || d.DeletionTimestamp != nil || w.now.Sub(req.Since.Time) >= requestWindow ||
			!slices.ContainsFunc(w.running(), func(m *v1alpha2.EtcdMember) bool { return m.Name == req.Member }) {
			continue
		}
		if pick == nil || d.CreationTimestamp.Before(&pick.CreationTimestamp) {
			pick = d
		}
	}
	return pick
}

// atRest: the pass changes nothing and reports the cluster at rest, at its
// current generation: what the defrag controller waits for too.
func atRest(w *world, p plan) bool {
	c := conditions.Get(w.cluster.Status.Conditions, conditions.Progressing)
	return p.change == nil && p.hold == nil && len(p.refused) == 0 && c != nil &&
		c.Reason == conditions.ReasonReconciled && c.ObservedGeneration == w.cluster.Generation
}

// nextLock is the lock the pass records: the held one; else, in a pass at
// rest, a grant of the pending request; else none.
func nextLock(w *world, p plan) *v1alpha2.MaintenanceLock {
	if l := heldLock(w); l != nil {
		return l
	}
	d := lockRequest(w)
	if d == nil || w.defragsUnknown || !atRest(w, p) {
		return nil
	}
	return &v1alpha2.MaintenanceLock{Holder: d.Name, Member: d.Status.Defragmenting.Member, RequestedAt: d.Status.Defragmenting.Since,
		GrantedAt: metav1.NewTime(w.now), ExpiresAt: metav1.NewTime(w.now.Add(lockLifetime))}
}

// updateLock records the lock (after the conditions: a grant needs the
// cluster at rest) and says in Events what it granted, what expired and
// what waits.
func (r *Reconciler) updateLock(ctx context.Context, w *world, p plan) {
	before, next := w.cluster.Status.MaintenanceLock, nextLock(w, p)
	w.cluster.Status.MaintenanceLock = next
	switch {
	case next != nil && next != before:
		logf(ctx, w)("Granted the maintenance lock; no membership change or restart until it ends", "etcddefrag", next.Holder, "member", next.Member)
		r.event(w.cluster, false, "MaintenanceLockGranted", "Defragment", "Granted EtcdDefrag %s the maintenance lock for member %s until %s: membership changes and restarts wait",
			next.Holder, next.Member, next.ExpiresAt.UTC().Format(time.RFC3339))
	case before != nil && next == nil && !w.now.Before(before.ExpiresAt.Time):
		r.event(w.cluster, true, "MaintenanceLockExpired", "Defragment", "The maintenance lock of EtcdDefrag %s for member %s expired at %s: membership changes and restarts go on, judged by etcd's own health",
			before.Holder, before.Member, before.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if p.progress.reason == conditions.ReasonWaitingForDefrag && !originalReason(w, conditions.ReasonWaitingForDefrag) {
		r.event(w.cluster, false, conditions.ReasonWaitingForDefrag, "Defragment", "%s", p.progress.message)
	}
}

// originalReason: the status the pass started from gave Progressing that
// reason (an Event per episode, not per pass).
func originalReason(w *world, reason string) bool {
	c := conditions.Get(w.original.Status.Conditions, conditions.Progressing)
	return c != nil && c.Reason == reason
}
