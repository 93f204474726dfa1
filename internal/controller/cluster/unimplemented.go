package cluster

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// holdUnimplemented reports spec fields this operator version accepts but
// does not act on yet, rather than ignoring them silently: a cluster that
// asks for a restore is not bootstrapped empty (that would look like the
// restored cluster), and a cluster that asks for authentication is not
// reported Available as if etcd checked credentials.
func (r *Reconciler) holdUnimplemented(_ context.Context, w *world) (*ctrl.Result, error) {
	spec := w.cluster.Spec
	switch {
	case spec.Bootstrap != nil && spec.Bootstrap.Restore != nil && w.cluster.Status.ClusterID == "" && len(w.members) == 0:
		w.blocked = &progress{conditions.ReasonNotImplemented,
			"spec.bootstrap.restore is not implemented by this operator version: the cluster is not bootstrapped, " +
				"so that an empty cluster is never taken for the restored one. Remove the EtcdCluster, or upgrade the operator"}
		w.working(w.blocked.reason, w.blocked.message)
		r.warnOnce(w, conditions.ReasonNotImplemented, "Bootstrap", w.blocked.message)
		return done(), nil
	case spec.Auth != nil && spec.Auth.Enabled:
		w.blocked = &progress{conditions.ReasonNotImplemented,
			"spec.auth is not implemented by this operator version: etcd runs without authentication, " +
				"so the cluster is not reported Available"}
		r.warnOnce(w, conditions.ReasonNotImplemented, "Auth", w.blocked.message)
	}
	return nil, nil
}
