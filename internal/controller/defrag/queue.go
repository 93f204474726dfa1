package defrag

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// queue is where a run stands among the runs of its cluster.
type queue struct {
	// ahead is the run that goes before this one, "" when it is its turn.
	ahead string
	// turnSince is when the last older run of the cluster finished (zero
	// when none is known): a run that has not started measures its
	// deadline from then, so time spent queued does not count against it.
	turnSince time.Time
}

// standing reads the runs of the run's cluster: one unfinished run per
// cluster at a time, the oldest (by creation, then name) first. The runs are
// read from the API server, not the cache: runs of one cluster may be
// reconciled at once, and a run the cache has not seen yet must not be taken
// for absent (two members blocked at once could cost the quorum).
func (r *Reconciler) standing(ctx context.Context, d *v1alpha2.EtcdDefrag) (queue, error) {
	list := &v1alpha2.EtcdDefragList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return queue{}, fmt.Errorf("listing the runs of the namespace: %w", err)
	}
	var q queue
	var first *v1alpha2.EtcdDefrag
	for i := range list.Items {
		o := &list.Items[i]
		if o.Spec.ClusterRef.Name != d.Spec.ClusterRef.Name || o.Name == d.Name {
			continue
		}
		if finished(o) {
			if o.Status.CompletedAt != nil && olderFirst(o, d) < 0 && o.Status.CompletedAt.After(q.turnSince) {
				q.turnSince = o.Status.CompletedAt.Time
			}
			continue
		}
		if o.DeletionTimestamp == nil && olderFirst(o, d) < 0 && (first == nil || olderFirst(o, first) < 0) {
			first = o
		}
	}
	if first != nil {
		q.ahead = first.Name
	}
	return q, nil
}
