package cluster

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// reconcilePDB keeps a PodDisruptionBudget over the voters that allows a
// voluntary disruption (drain, eviction) only while a majority of the voters
// that remain stays up. With no voter running there is nothing to protect
// and the budget is removed.
func (r *Reconciler) reconcilePDB(ctx context.Context, w *world) error {
	voters, unavailable := r.budgetCounts(w)
	want := manifest.PodDisruptionBudget(w.cluster, manifest.PDBMinAvailable(voters, int32(w.desired()), unavailable))
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

// budgetCounts returns the voters etcd has (those being removed included:
// until they are gone they count towards quorum) and how many voters the
// budget would count as available although they are not: being removed
// (their Pods may still carry the role label the budget selects on), or
// unhealthy by etcd's fresh report while their Pod still reads Ready (a
// member cut off from its peers until its probe fails; a Pod on a node that
// stopped answering keeps its last status until the node is declared lost).
func (r *Reconciler) budgetCounts(w *world) (voters, unavailable int32) {
	for _, m := range w.members {
		if m.Spec.Dormant || !w.isVoter(m) {
			continue
		}
		voters++
		if deleting(m) || (!w.healthy(m) && w.pods[m.Name] != nil && podReady(w.pods[m.Name])) {
			unavailable++
		}
	}
	if w.etcd.list != nil {
		// Voters no EtcdMember accounts for count too.
		n := int32(0)
		for _, em := range w.etcd.list.Members {
			if !em.IsLearner {
				n++
			}
		}
		voters = max(voters, n)
	}
	return voters, unavailable
}
