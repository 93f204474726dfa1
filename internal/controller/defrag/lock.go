package defrag

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// A run calls Defragment only under the EtcdCluster's maintenance lock
// (status.maintenanceLock), which the cluster controller alone writes: it
// grants the lock in a pass that makes no change and finds the cluster at
// rest, and makes no membership change and restarts no member while the
// lock is held (see package cluster, maintenance_lock.go). The run asks for
// it by naming the member in its status.defragmenting, which only this
// controller writes: before the call, and cleared once the call returned
// or the run waits, so that a cluster that has work to do gets the lock
// back at once.

// renewAfter is how long a request waits for its grant before the run
// asks again with a new time: the cluster controller grants only requests
// younger than a minute, so that a request left by a run that died is not
// granted again once its lock expired.
const renewAfter = 30 * time.Second

// lockVerdict is what a run may do about the member it is at.
type lockVerdict int

const (
	// lockGo: the lock is granted for this request, with time left for a
	// whole Defragment call.
	lockGo lockVerdict = iota
	// lockWait: asked, not granted yet.
	lockWait
	// lockAsk: ask (again), with a new time: there is no request for this
	// member, its grant expired or ends too soon for a call, or it went
	// unanswered too long.
	lockAsk
)

// judgeLock decides from the run's request, the cluster's lock (read
// fresh) and now, and says why.
func judgeLock(req *v1alpha2.DefragRequest, l *v1alpha2.MaintenanceLock, run, member string, now time.Time) (lockVerdict, string) {
	if req == nil || req.Member != member {
		return lockAsk, "no request for member " + member
	}
	if l != nil && l.Holder == run && l.Member == member && l.RequestedAt.Equal(&req.Since) {
		if left := l.ExpiresAt.Sub(now); left < defragTimeout {
			return lockAsk, fmt.Sprintf("the lock expires in %s, too soon for a Defragment call of up to %s", left.Round(time.Second), defragTimeout)
		}
		return lockGo, "granted until " + l.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if now.Sub(req.Since.Time) >= renewAfter {
		return lockAsk, fmt.Sprintf("the request of %s was not granted", req.Since.UTC().Format(time.RFC3339))
	}
	return lockWait, "asked at " + req.Since.UTC().Format(time.RFC3339)
}

// takeLock reports whether the run holds the cluster's maintenance lock
// for m now, read from the API server (the cache may lag behind the grant
// or its end). Otherwise it asks for the lock, or waits for the grant, or
// defers the run when the cluster is no longer at rest; the result says
// when to look again.
func (r *Reconciler) takeLock(ctx context.Context, p *pass, m *v1alpha2.EtcdMember) (bool, ctrl.Result, error) {
	c := &v1alpha2.EtcdCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p.cluster), c); err != nil {
		return false, ctrl.Result{}, fmt.Errorf("reading the EtcdCluster's maintenance lock: %w", err)
	}
	if why := busy(c); why != "" {
		// A change came in since the pass began: it goes first.
		return false, r.deferRun(p, conditions.ReasonClusterBusy, why), nil
	}
	v, why := judgeLock(p.run.Status.Defragmenting, c.Status.MaintenanceLock, p.run.Name, m.Name, p.now)
	if v == lockAsk {
		p.run.Status.Defragmenting = &v1alpha2.DefragRequest{Member: m.Name, Since: metav1.NewTime(p.now)}
	}
	// The request (and the row's decision) is recorded before any call.
	if err := r.writeStatus(ctx, p); err != nil {
		return false, ctrl.Result{}, err
	}
	if v == lockGo {
		return true, ctrl.Result{}, nil
	}
	logger(ctx, p.run)("Waiting for the EtcdCluster to grant the maintenance lock before defragmenting a member", "member", m.Name, "why", why)
	// The grant comes through the watch on the cluster; the timer is a
	// backstop.
	return false, ctrl.Result{RequeueAfter: retry}, nil
}
