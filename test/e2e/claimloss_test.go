package e2e

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestDeletedClaimReplacesMember deletes a running member's claim and then
// its Pod, with a writer running: the member's data goes with the claim, so
// it is replaced as a new member. It is never restarted under its old etcd
// identity on a new, empty claim (raft's empty-disk hazard): no claim of its
// name is created again.
func TestDeletedClaimReplacesMember(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-claimloss")
	const name = "unclaimed"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	victim := members(t, ns, name)[1].Name
	claim := manifest.PVCName(victim)
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc); err != nil {
		t.Fatal(err)
	}
	first := pvc.UID
	var recreated atomic.Bool
	stop := every(100*time.Millisecond, func() {
		p := &corev1.PersistentVolumeClaim{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, p); err == nil && p.UID != first {
			recreated.Store(true)
		}
	})
	w.mark("claim deleted")
	// The claim waits for its Pod (pvc-protection); the Pod goes next.
	if err := k.Delete(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim}}); err != nil {
		t.Fatal(err)
	}
	waitReplaced(t, ns, name, victim, 3, 3*time.Minute)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("replaced")
	stop()
	if recreated.Load() {
		t.Errorf("a new claim %s was created for the member whose claim was deleted", claim)
	}
	// Replaced as data-lost (its Pod went first), or as a member whose
	// claim is being deleted (the operator saw the claim terminating while
	// the Pod still held it): either way as a new member.
	if !eventRecorded(t, ns, "ReplacingMember", "DataDirLost") && !eventRecorded(t, ns, "ReplacingMember", "is being deleted") {
		t.Errorf("the member was not replaced for its lost claim")
	}
	w.requireWritesBetween("claim deleted", "replaced", 1)
	w.verify("replaced")
}
