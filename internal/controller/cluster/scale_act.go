package cluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The action of a pause (scale.go plans it): the last member goes
// dormant, keeping its volume and identity, and wakes on a resume.

// setDormant pauses or wakes a member: a dormant member has no Pod but keeps
// its volume and identity, so waking it resumes the same etcd member.
func (r *Reconciler) setDormant(ctx context.Context, w *world, m *v1alpha2.EtcdMember, dormant bool) error {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.Dormant = dormant
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("setting dormant=%t on %s: %w", dormant, m.Name, err)
	}
	if dormant {
		r.event(w.cluster, false, conditions.ReasonPaused, "Pause", "Paused the cluster: member %s is dormant, its volume is kept", m.Name)
	} else {
		r.event(w.cluster, false, conditions.ReasonResuming, "Resume", "Resuming dormant member %s", m.Name)
	}
	return nil
}
