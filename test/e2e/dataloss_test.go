package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestDataDirLossReplaced empties the volume of a member and restarts it, then
// does the same to the seed: etcd refuses to run on the lost data, the
// operator sees why in the termination message, removes the member and adds
// a fresh one. The seed is never bootstrapped again: the cluster keeps its
// ID and every acknowledged write.
func TestDataDirLossReplaced(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-dataloss")
	const name = "wiped"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	// The guard runs from the operator's image where the nodes can mount
	// it (the sandbox), else from a copy (the integration tier).
	requireToolsVolume(t, ns, name, !integration())
	id := getCluster(t, ns, name).Status.ClusterID
	w := startWriter(t, ns, name)
	eventually(t, time.Minute, "some writes", func() (bool, string) { return w.count() > 20, "" })
	for i, victim := range []string{members(t, ns, name)[2].Name, seedOf(t, ns, name).Name} {
		ctx := context.Background()
		lost, back := fmt.Sprintf("lost %d", i), fmt.Sprintf("replaced %d", i)
		w.mark(lost)
		if err := injector().Wipe(ctx, ns, manifest.PVCName(victim)); err != nil {
			t.Fatal(err)
		}
		if err := injector().Kill(ctx, ns, victim, manifest.EtcdContainer); err != nil {
			t.Fatal(err)
		}
		waitReplaced(t, ns, name, victim, 3, 3*time.Minute)
		waitReconciled(t, ns, name, 3, 3*time.Minute)
		w.mark(back)
		w.requireWritesBetween(lost, back, 1)
		t.Logf("%s: longest write stall %s", victim, w.longestStall(lost, back).Round(time.Millisecond))
	}
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("cluster ID changed from %s to %s: the seed bootstrapped a new cluster", id, got)
	}
	w.verify("replaced 1")
}
