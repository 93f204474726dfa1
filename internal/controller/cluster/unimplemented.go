package cluster

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// holdUnimplemented reports spec fields this operator version accepts but
// does not act on yet, rather than ignoring them silently: a cluster that
// asks for authentication is not reported Available as if etcd checked
// credentials.
func (r *Reconciler) holdUnimplemented(_ context.Context, w *world) (*ctrl.Result, error) {
	if spec := w.cluster.Spec; spec.Auth != nil && spec.Auth.Enabled {
		w.blocked = &progress{conditions.ReasonNotImplemented,
			"spec.auth is not implemented by this operator version: etcd runs without authentication, " +
				"so the cluster is not reported Available"}
		r.warnOnce(w, conditions.ReasonNotImplemented, "Auth", w.blocked.message)
	}
	return nil, nil
}
