package defrag

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// aheadOf returns the run that goes before this one, or "": one unfinished
// run per cluster at a time, the oldest (by creation, then name) first. The
// runs are read from the API server, not the cache: runs of one cluster may
// be reconciled at once, and a run the cache has not seen yet must not be
// taken for absent (two members blocked at once could cost the quorum).
func (r *Reconciler) aheadOf(ctx context.Context, d *v1alpha2.EtcdDefrag) (string, error) {
	list := &v1alpha2.EtcdDefragList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return "", fmt.Errorf("listing the runs of the namespace: %w", err)
	}
	var first *v1alpha2.EtcdDefrag
	for i := range list.Items {
		o := &list.Items[i]
		if o.Spec.ClusterRef.Name != d.Spec.ClusterRef.Name || finished(o) || o.DeletionTimestamp != nil {
			continue
		}
		if first == nil || olderFirst(o, first) < 0 {
			first = o
		}
	}
	if first == nil || first.Name == d.Name || olderFirst(d, first) < 0 {
		return "", nil
	}
	return first.Name, nil
}
