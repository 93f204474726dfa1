package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

const snapBeforeNS = "e2e-snapbefore"

func init() { suiteNamespaces = append(suiteNamespaces, snapBeforeNS) }

// TestSnapshotBefore scales a cluster under a writer from 3 to 1 with
// spec.snapshotBefore guarding scale-ins: the snapshot taken before goes to
// a claim that does not exist, fails, and the scale-in is held (three
// members serve, Progressing False with SnapshotBeforeFailed); once the
// destination is fixed and the failed snapshot deleted, the operator takes
// it again, and the scale-in goes on only after it is Complete. The writer
// loses nothing and keeps being acknowledged once the cluster is down to one.
func TestSnapshotBefore(t *testing.T) {
	t.Parallel()
	ns := namespace(t, snapBeforeNS)
	newClaim(t, ns, "backups")
	const name = "guarded"
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.SnapshotBefore = &v1alpha2.SnapshotBeforeSpec{Changes: []v1alpha2.SnapshotBeforeChange{v1alpha2.SnapshotBeforeScaleIn},
			Destination: ptr.To(pvcLocation("no-such-claim", name))}
	})
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)

	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Replicas = ptr.To(int32(1)) })
	var before string
	eventually(t, 3*time.Minute, "the scale-in held by its failed snapshot", func() (bool, string) {
		c := getCluster(t, ns, name)
		p := conditions.Get(c.Status.Conditions, conditions.Progressing)
		if p != nil && p.Reason == conditions.ReasonSnapshotBeforeFailed {
			before = strings.TrimSuffix(strings.Fields(p.Message)[1], ",")
			return true, ""
		}
		return false, condString(p)
	})
	if c := getCluster(t, ns, name); c.Status.Observed.Replicas != 3 || len(members(t, ns, name)) != 3 {
		t.Fatalf("while its snapshot failed, the target is %d and %d members run, want 3 and 3", c.Status.Observed.Replicas, len(members(t, ns, name)))
	}
	if !eventRecorded(t, ns, conditions.ReasonSnapshotBeforeFailed, before) {
		t.Errorf("no Warning Event %s about snapshot %s", conditions.ReasonSnapshotBeforeFailed, before)
	}

	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		c.Spec.SnapshotBefore.Destination = ptr.To(pvcLocation("backups", name))
	})
	failed := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Name: before, Namespace: ns}}
	if err := k.Delete(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the snapshot taken again", func() (bool, string) {
		s := &v1alpha2.EtcdSnapshot{}
		err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: before}, s)
		return err == nil && s.Spec.Destination.PVC != nil && s.Spec.Destination.PVC.ClaimName == "backups" &&
			s.Annotations[manifest.AnnotationSnapshotBefore] == "scale-in", errString(err)
	})
	waitSnapshot(t, ns, before, v1alpha2.SnapshotComplete, "", 5*time.Minute)
	waitReconciled(t, ns, name, 1, 5*time.Minute)
	w.mark("scaled in")
	w.verify("scaled in")
}
