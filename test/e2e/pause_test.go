package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPauseAndResume scales 3 → 0 → 3: the last member goes dormant (no Pod,
// volume and identity kept) and comes back with the same cluster ID, the
// same member ID and the data.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-pause")
	const name = "paused"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	eventually(t, time.Minute, "some writes", func() (bool, string) { return w.count() > 20, "" })
	id := getCluster(t, ns, name).Status.ClusterID

	// The writer keeps writing through the pause: writes fail while no
	// member runs, and must succeed again once the cluster is back.
	w.mark("pausing")
	setReplicas(t, ns, name, 0)
	waitReconciled(t, ns, name, 0, 3*time.Minute)
	eventually(t, time.Minute, "one dormant member without a pod", func() (bool, string) {
		ms := members(t, ns, name)
		return len(ms) == 1 && ms[0].Spec.Dormant && ms[0].Status.PodName == "", fmt.Sprint(memberNames(ms))
	})
	survivor := members(t, ns, name)[0]
	// Pods of removed members go through garbage collection and graceful
	// termination; the dormant member's Pod is deleted by the operator.
	eventually(t, time.Minute, "no pods left in the paused cluster", func() (bool, string) {
		n := len(pods(t, ns, name))
		return n == 0, fmt.Sprintf("%d pods", n)
	})
	if out, err := kubectl("-n", ns, "get", "pvc", survivor.Status.PVCName); err != nil {
		t.Fatalf("the dormant member's volume is gone: %s", out)
	}

	w.mark("paused")
	setReplicas(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("resumed")
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("cluster ID changed from %s to %s", id, got)
	}
	var back bool
	for _, m := range members(t, ns, name) {
		if m.Name == survivor.Name {
			back = m.Status.MemberID == survivor.Status.MemberID
		}
	}
	if !back {
		t.Errorf("member %s did not come back with member ID %s", survivor.Name, survivor.Status.MemberID)
	}
	w.verify("resumed")
	checkReadable(t, ns, name)
}

// checkReadable does a linearizable read through every member.
func checkReadable(t *testing.T, ns, name string) {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	eps, err := podEndpoints(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		c.SetEndpoints(ep)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.Get(ctx, "e2e/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			t.Errorf("reading through %s: %v", ep, err)
		}
	}
}
