package member

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/teardown"
)

// finalize handles a deleted member. Removing it from etcd is the cluster
// controller's: every membership change goes through that one serialised
// path, projected against the membership the previous change left, and the
// cluster controller releases the finalizer once etcd no longer lists the
// member. Here the finalizer is only released when there is no cluster to
// remove the member from: the cluster is gone or being deleted.
func (r *Reconciler) finalize(ctx context.Context, s *state) (ctrl.Result, error) {
	m := s.member
	if !controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) {
		return ctrl.Result{}, nil
	}
	if s.cluster != nil && s.cluster.DeletionTimestamp == nil && !teardown.Going(ctx, r.APIReader, m.Namespace) {
		// Until etcd lets it go it is still a member: it keeps running
		// (its Pod is made again if it goes) and reporting (its health
		// counts in every quorum projection). A member deleted while it
		// serves leaves only once its replacement joined, and the volume
		// goes with it only then.
		return r.keep(ctx, s)
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, manifest.MemberFinalizer)
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// keep runs a deleted member that etcd still lists as any other member.
func (r *Reconciler) keep(ctx context.Context, s *state) (ctrl.Result, error) {
	res, err := r.realize(ctx, s)
	if werr := r.writeStatus(ctx, s); werr != nil && err == nil {
		err = werr
	}
	return res, err
}
