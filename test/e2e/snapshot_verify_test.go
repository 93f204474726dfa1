package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// TestSnapshotVerified takes a snapshot of a cluster under a writer to a
// claim, with verification: the Job restores the stored file with etcdutl
// of the cluster's release and finds the revision, key count and etcd's
// hash of the keys the snapshot agent recorded. The restore agent's own
// tests cover the refusals (flipped bytes, a replaced file, a missing one).
func TestSnapshotVerified(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-snapverify")
	newClaim(t, ns, "backups")
	const source = "verified"
	newCluster(t, ns, source, 3)
	waitReconciled(t, ns, source, 3, 5*time.Minute)
	writeKeys(t, ns, source, 2000)
	w := startWriter(t, ns, source)
	s := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "checked", Namespace: ns},
		Spec: v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: source}, Destination: pvcLocation("backups", source),
			Verify: true},
	}
	if err := k.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	stored := waitSnapshot(t, ns, "checked", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	a := stored.Status.Artifact
	if a == nil || a.Revision == 0 || a.KeyCount == nil || *a.KeyCount < 2000 || a.KVHash == nil {
		t.Fatalf("the snapshot agent recorded %+v, want a revision, a key count of at least 2000 and a hash", a)
	}
	eventually(t, 5*time.Minute, "snapshot checked verified", func() (bool, string) {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "checked"}, s); err != nil {
			return false, err.Error()
		}
		c := conditions.Get(s.Status.Conditions, conditions.Verified)
		return c != nil && c.Status != metav1.ConditionUnknown, condString(c)
	})
	c := conditions.Get(s.Status.Conditions, conditions.Verified)
	if c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonVerificationPassed {
		t.Fatalf("Verified = %s", condString(c))
	}
	v := s.Status.Verification
	if v == nil || v.Checksum != a.Checksum || v.KeyCount != *a.KeyCount || v.KVHash == nil || *v.KVHash != *a.KVHash ||
		v.Revision < a.Revision || v.EtcdVersion != etcdVersion {
		t.Errorf("verification found %+v; the agent recorded %+v", v, a)
	}
	if out, _ := kubectl("-n", ns, "get", "events", "--field-selector", "reason="+conditions.ReasonVerificationPassed, "-o", "name"); strings.TrimSpace(out) == "" {
		t.Errorf("no Event %s", conditions.ReasonVerificationPassed)
	}
	w.verify("")
}
