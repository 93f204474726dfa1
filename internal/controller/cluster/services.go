package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// ensureServices creates the headless and client Services and repairs the
// fields members depend on (selector, publishNotReadyAddresses, the named
// ports). Anything else a user adds (labels, annotations, extra ports) stays.
func (r *Reconciler) ensureServices(ctx context.Context, w *world) error {
	for _, want := range []*corev1.Service{manifest.HeadlessService(w.cluster), manifest.ClientService(w.cluster)} {
		if err := r.ensureService(ctx, want); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) ensureService(ctx context.Context, want *corev1.Service) error {
	have := &corev1.Service{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating service %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading service %s: %w", want.Name, err)
	}
	patch := client.MergeFrom(have.DeepCopy())
	if !repairService(have, want) {
		return nil
	}
	if err := r.Client.Patch(ctx, have, patch); err != nil {
		return fmt.Errorf("repairing service %s: %w", want.Name, err)
	}
	return nil
}

// repairService brings the fields the operator owns back in line and reports
// whether it changed anything.
func repairService(have, want *corev1.Service) bool {
	changed := false
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) {
		have.Spec.Selector, changed = want.Spec.Selector, true
	}
	if have.Spec.PublishNotReadyAddresses != want.Spec.PublishNotReadyAddresses {
		have.Spec.PublishNotReadyAddresses, changed = want.Spec.PublishNotReadyAddresses, true
	}
	for _, p := range want.Spec.Ports {
		i := slices.IndexFunc(have.Spec.Ports, func(h corev1.ServicePort) bool { return h.Name == p.Name })
		switch {
		case i < 0:
			have.Spec.Ports, changed = append(have.Spec.Ports, p), true
		case have.Spec.Ports[i].Port != p.Port || have.Spec.Ports[i].TargetPort != p.TargetPort || have.Spec.Ports[i].Protocol != p.Protocol:
			have.Spec.Ports[i], changed = p, true
		}
	}
	return changed
}
