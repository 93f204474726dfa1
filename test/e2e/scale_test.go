package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestScale grows and shrinks a cluster with kubectl scale, one member at a
// time: 1 → 3 → 5 → 3 → 1, keeping its cluster ID; shrinking removes the
// newest members first.
func TestScale(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-scale")
	const name = "scaled"
	newCluster(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 2*time.Minute)
	id := getCluster(t, ns, name).Status.ClusterID
	w := startWriter(t, ns, name)
	var atFive []string
	for _, n := range []int32{3, 5, 3, 1} {
		before := memberNames(members(t, ns, name))
		step := fmt.Sprintf("scale to %d", n)
		w.mark(step)
		setReplicas(t, ns, name, n)
		waitReconciled(t, ns, name, int(n), 3*time.Minute)
		w.mark(step + " done")
		// Quorum holds through every step: writes go on.
		w.requireWritesBetween(step, step+" done", 1)
		t.Logf("%s: longest write stall %s", step, w.longestStall(step, step+" done").Round(time.Millisecond))
		after := memberNames(members(t, ns, name))
		if n == 5 {
			atFive = after
		}
		if n < int32(len(before)) && !slices.Equal(after, before[:n]) {
			t.Errorf("scaling %d → %d kept %v, want the oldest %v", len(before), n, after, before[:n])
		}
	}
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("cluster ID changed from %s to %s", id, got)
	}
	if len(atFive) != 5 {
		t.Errorf("members at 5: %v", atFive)
	}
	w.verify("scale to 1 done")
}
