package cluster

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/build"
)

// reconcilePDB keeps a PodDisruptionBudget over the voters that allows a
// voluntary disruption (drain, eviction) only while a majority stays up. With
// no voter running there is nothing to protect and the budget is removed.
func (r *Reconciler) reconcilePDB(ctx context.Context, w *world) error {
	voters := int32(0)
	for _, m := range w.running() {
		if m.Status.IsVoter {
			voters++
		}
	}
	want := build.PodDisruptionBudget(w.cluster, voters, int32(w.desired()))
	have := &policyv1.PodDisruptionBudget{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err) && voters == 0:
		return nil
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PodDisruptionBudget: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading PodDisruptionBudget: %w", err)
	case voters == 0:
		return client.IgnoreNotFound(r.Client.Delete(ctx, have))
	}
	if have.Spec.MaxUnavailable == nil && have.Spec.MinAvailable != nil && *have.Spec.MinAvailable == *want.Spec.MinAvailable {
		return nil
	}
	patch := client.MergeFrom(have.DeepCopy())
	have.Spec.MinAvailable, have.Spec.MaxUnavailable = want.Spec.MinAvailable, nil
	if err := r.Client.Patch(ctx, have, patch); err != nil {
		return fmt.Errorf("updating PodDisruptionBudget: %w", err)
	}
	return nil
}
