package cluster

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The actions of a recovery from quorum loss (see recover.go for the plan).
// Each is idempotent: done twice, or begun again after a crash, it ends in
// the same place.

// actRecovery carries out the changes of a recovery from quorum loss.
func (r *Reconciler) actRecovery(ctx context.Context, w *world, c *change) error {
	switch c.kind {
	case forceNewCluster:
		return r.forceNewCluster(ctx, w, c.member, c.message)
	case fence, unfence:
		return r.fence(ctx, w, c.member, c.kind == fence, c.message)
	case discard:
		return r.discard(ctx, w, c)
	case clearForce:
		return r.clearForce(ctx, w, c.member, c.reason, c.message)
	}
	return fmt.Errorf("change %s is not a recovery's", c.kind)
}

// forceNewCluster marks the survivor with the plan's token and deletes its
// Pod if that Pod was made without the mark; the member controller's new
// Pod carries it and runs etcd with --force-new-cluster. The Pod is deleted,
// not evicted: the budget counts voters that serve, and none does.
func (r *Reconciler) forceNewCluster(ctx context.Context, w *world, m *v1alpha2.EtcdMember, token string) error {
	if m.Annotations[manifest.AnnotationForceNewCluster] == "" {
		patch := client.MergeFrom(m.DeepCopy())
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationForceNewCluster, token)
		if err := r.Client.Patch(ctx, m, patch); err != nil {
			return fmt.Errorf("marking %s as the survivor: %w", m.Name, err)
		}
		r.event(w.cluster, true, conditions.ReasonRecoveringQuorum, "Recover",
			"Recovering from quorum loss with plan %s: %s restarts as the only member of the cluster", token, m.Name)
		logf(ctx, w)("Recovering from quorum loss", "survivor", m.Name, "token", token)
	}
	pod := w.pods[m.Name]
	if pod == nil || pod.DeletionTimestamp != nil || pod.Annotations[manifest.AnnotationForceNewCluster] != "" {
		return nil
	}
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("restarting the survivor's pod %s: %w", pod.Name, err)
	}
	r.event(m, true, conditions.ReasonRecoveringQuorum, "Recover", "Restarting with --force-new-cluster (plan %s)", token)
	return nil
}

// clearForce takes the survivor's mark off its member, then off its Pod:
// from then on a restart of its container starts etcd normally. With a
// reason, the mark was not the operator's own and a Warning says why.
func (r *Reconciler) clearForce(ctx context.Context, w *world, m *v1alpha2.EtcdMember, reason, why string) error {
	if m.Annotations[manifest.AnnotationForceNewCluster] != "" {
		patch := client.MergeFrom(m.DeepCopy())
		delete(m.Annotations, manifest.AnnotationForceNewCluster)
		if err := r.Client.Patch(ctx, m, patch); err != nil {
			return fmt.Errorf("taking the survivor's mark off %s: %w", m.Name, err)
		}
	}
	if pod := w.pods[m.Name]; pod != nil && pod.Annotations[manifest.AnnotationForceNewCluster] != "" {
		patch := client.MergeFrom(pod.DeepCopy())
		delete(pod.Annotations, manifest.AnnotationForceNewCluster)
		if err := r.Client.Patch(ctx, pod, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("taking the survivor's mark off pod %s: %w", pod.Name, err)
		}
	}
	if reason != "" {
		r.event(m, true, reason, "Recover", "%s", why)
		logf(ctx, w)("Took off a survivor's mark no recovery authorizes", "member", m.Name, "why", why)
		return nil
	}
	r.event(w.cluster, false, conditions.ReasonRecoveringQuorum, "Recover", "%s serves as the only member of the cluster", m.Name)
	return nil
}

// announceRecovery emits an Event when the recovery's phase or plan
// changes.
func (r *Reconciler) announceRecovery(w *world, rec *v1alpha2.RecoveryStatus) {
	old := w.original.Status.Recovery
	if rec == nil || (old != nil && old.Phase == rec.Phase && old.Token == rec.Token) {
		return
	}
	switch rec.Phase {
	case v1alpha2.RecoveryPlanned:
		r.event(w.cluster, true, conditions.ReasonRecoveryPlanned, "PlanRecovery", "Recovery plan %s: rebuild from %s, discard %s",
			rec.Token, origin(rec), orNone(discardedNames(rec)))
	case v1alpha2.RecoveryRefused:
		r.event(w.cluster, true, conditions.ReasonRecoveryRefused, "PlanRecovery", "%s", rec.Message)
	case v1alpha2.RecoveryCompleted:
		r.event(w.cluster, false, "QuorumRecovered", "Recover", "%s", rec.Message)
	}
}

// fence makes a discarded member dormant before the survivor is forced
// (its Pod goes, so it cannot serve under the old membership), or wakes it
// again when the recovery stops.
func (r *Reconciler) fence(ctx context.Context, w *world, m *v1alpha2.EtcdMember, stop bool, why string) error {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.Dormant = stop
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("setting dormant=%t on %s: %w", stop, m.Name, err)
	}
	if stop {
		r.event(w.cluster, false, conditions.ReasonRecoveringQuorum, "Fence", "Stopped member %s, which the recovery discards, before forcing the survivor: %s", m.Name, why)
	} else {
		r.event(w.cluster, false, conditions.ReasonRecoveringQuorum, "Unfence", "Woke member %s: %s", m.Name, why)
	}
	return nil
}

// discard deletes a member a recovery discarded. Unless the plan deletes
// the volumes too, the member is first made dormant (its controller then
// stops its Pod and no longer looks after its claim), and its claim
// released from it (no owner: the garbage collector leaves it) and
// labelled with the cluster's name; done twice, or after a crash between
// any two calls, it ends the same.
func (r *Reconciler) discard(ctx context.Context, w *world, c *change) error {
	if c.keepClaim {
		if !c.member.Spec.Dormant {
			if err := r.fence(ctx, w, c.member, true, "its claim is kept"); err != nil {
				return err
			}
		}
		if err := r.keepClaim(ctx, w, c.member); err != nil {
			return err
		}
	}
	return r.deleteMember(ctx, w, c.member, c.reason, c.message)
}

// keepClaim releases a discarded member's claim from it and labels it.
func (r *Reconciler) keepClaim(ctx context.Context, w *world, m *v1alpha2.EtcdMember) error {
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: manifest.PVCName(m.Name)}, pvc)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the claim of discarded member %s: %w", m.Name, err)
	}
	owned := slices.ContainsFunc(pvc.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == m.UID })
	if !owned && pvc.Labels[manifest.LabelDiscardedFrom] == w.cluster.Name {
		return nil
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.OwnerReferences = slices.DeleteFunc(pvc.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == m.UID })
	metav1.SetMetaDataLabel(&pvc.ObjectMeta, manifest.LabelDiscardedFrom, w.cluster.Name)
	if err := r.Client.Patch(ctx, pvc, patch); err != nil {
		return fmt.Errorf("keeping the claim of discarded member %s: %w", m.Name, err)
	}
	r.event(w.cluster, false, conditions.ReasonRecoveringQuorum, "KeepClaim",
		"Kept claim %s of discarded member %s (label %s=%s); delete it once you no longer need its data", pvc.Name, m.Name, manifest.LabelDiscardedFrom, w.cluster.Name)
	return nil
}
