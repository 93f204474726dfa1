// Package teardown tells the controllers when an error only says that the
// namespace they work in is being deleted: everything in it goes, the
// cluster included, so there is nothing left to keep consistent and the
// error is no failure worth retrying or reporting.
package teardown

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Terminating reports whether an error says the namespace is being deleted
// (a create refused there).
func Terminating(err error) bool {
	return err != nil && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}

// Going reports whether a namespace is being deleted, asking the API server.
func Going(ctx context.Context, r client.Reader, name string) bool {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return false
	}
	return ns.DeletionTimestamp != nil
}

// Ignorable reports whether err only reflects the deletion of namespace ns:
// a create refused there, or an access refused while it goes (with
// namespaced rights, the operator's Role in it goes too).
func Ignorable(ctx context.Context, r client.Reader, ns string, err error) bool {
	if err == nil {
		return false
	}
	if Terminating(err) {
		return true
	}
	return apierrors.IsForbidden(err) && Going(ctx, r, ns)
}
