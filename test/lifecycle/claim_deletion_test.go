package lifecycle

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// pvcProtection is the finalizer Kubernetes puts on every claim: a claim
// being deleted stays until no Pod uses it.
const pvcProtection = "kubernetes.io/pvc-protection"

// deleteClaimHeld deletes a member's claim as a user would, with the
// protection Kubernetes gives it: it stays, terminating, while the
// member's Pod holds it.
func (h *harness) deleteClaimHeld(member string) {
	h.t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := h.raw.Get(ctx, client.ObjectKey{Namespace: ns, Name: manifest.PVCName(member)}, pvc); err != nil {
		h.t.Fatal(err)
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.Finalizers = append(pvc.Finalizers, pvcProtection)
	if err := h.raw.Patch(ctx, pvc, patch); err != nil {
		h.t.Fatal(err)
	}
	if err := h.raw.Delete(ctx, pvc); err != nil {
		h.t.Fatal(err)
	}
}

// releaseUnusedClaims is the protection controller: a terminating claim no
// Pod uses loses its finalizer.
func (h *harness) releaseUnusedClaims() {
	ctx := context.Background()
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = h.raw.List(ctx, pvcs)
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.DeletionTimestamp == nil || !slices.Contains(pvc.Finalizers, pvcProtection) {
			continue
		}
		p := &corev1.Pod{}
		if err := h.raw.Get(ctx, client.ObjectKey{Namespace: ns, Name: pvc.Name[len("data-"):]}, p); err == nil {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Finalizers = slices.DeleteFunc(pvc.Finalizers, func(f string) bool { return f == pvcProtection })
		_ = h.raw.Patch(ctx, pvc, patch)
	}
}

// Claim 9 of issue 41: the claims of two of three members deleted at once.
// They were both marked lost while they still served, and every repair was
// refused for want of quorum. Now each keeps serving and voting on the
// volume its Pod holds until its replacement is a healthy voter; the
// cluster ends with three members, none of the two, and never lost quorum
// on the way (the harness checks every change against etcd).
func TestDeletedClaimsOfTwoMembersAreReplaced(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	var doomed []string
	for _, m := range h.members("c") {
		if m.Name != h.leaderName() {
			doomed = append(doomed, m.Name)
		}
	}
	for _, name := range doomed {
		h.deleteClaimHeld(name)
	}
	h.afterCluster = h.releaseUnusedClaims
	h.run("replaced", func() bool {
		for _, name := range doomed {
			if h.memberNamed(name) != nil {
				return false
			}
		}
		return h.converged("c", 3)()
	})
	if n := h.events.notes(conditions.ReasonReplacingMember); len(n) == 0 {
		t.Error("no Event says the members are replaced")
	}
}
