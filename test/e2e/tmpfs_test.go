package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// TestTmpfsMemberReplaced deletes the Pods of memory-backed members, the
// seed's included: the data went with each Pod, so the member is removed
// from etcd and a fresh one takes its place.
func TestTmpfsMemberReplaced(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-tmpfs")
	const name = "cache"
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse("256Mi")}
		c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](100 << 20)}
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	id := getCluster(t, ns, name).Status.ClusterID
	w := startWriter(t, ns, name)
	for i, victim := range []string{members(t, ns, name)[2].Name, seedOf(t, ns, name).Name} {
		lost, back := fmt.Sprintf("lost %d", i), fmt.Sprintf("replaced %d", i)
		w.mark(lost)
		deletePod(t, ns, victim)
		waitReplaced(t, ns, name, victim, 3, 3*time.Minute)
		waitReconciled(t, ns, name, 3, 3*time.Minute)
		w.mark(back)
		// Two of three voters stay: writes go on throughout.
		w.requireWritesBetween(lost, back, 1)
		t.Logf("%s: longest write stall %s", victim, w.longestStall(lost, back).Round(time.Millisecond))
	}
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("cluster ID changed from %s to %s", id, got)
	}
	w.verify("replaced 1")
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	p := &corev1.Pod{}
	p.Namespace, p.Name = ns, name
	if err := k.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}
