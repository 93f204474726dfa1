package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// TestConcurrentDeletionsKeepQuorum cuts one voter of four off the network
// and deletes two other EtcdMembers at the same moment, with a writer
// running. The removals go one at a time, each against the membership the
// previous one left: the first leaves three voters of which two are
// connected; the second would leave one of two and waits (the cluster says
// why), with writes going on. Once the cut is healed the second removal
// proceeds and the cluster grows back to four.
func TestConcurrentDeletionsKeepQuorum(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-concurrent")
	const name = "quartet"
	newCluster(t, ns, name, 4)
	waitReconciled(t, ns, name, 4, 4*time.Minute)
	w := startWriter(t, ns, name)
	ms := members(t, ns, name)
	cut := ms[3].Name
	ctx := context.Background()
	if err := sb.Partition(ctx, ns, cut); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = sb.Heal(context.Background(), ns, cut)
		}
	})
	eventually(t, time.Minute, cut+" unready", func() (bool, string) {
		return !podIsReady(pods(t, ns, name)[cut].Status.Conditions), ""
	})
	// Deliberate deletions, past the chart's guard; annotated first so
	// that the two deletions still come at the same moment.
	for i := range ms[:2] {
		allowDeletion(t, &ms[i])
	}
	w.mark("deleting")
	for _, m := range ms[:2] {
		if err := k.Delete(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 2*time.Minute, "the second removal waits for quorum", func() (bool, string) {
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason == conditions.ReasonRefused && strings.Contains(d.Message, "removing deleted member"), condString(d)
	})
	list, err := etcdMemberList(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 3 {
		t.Fatalf("etcd has %d members: both removals went through with a voter cut off", len(list))
	}
	w.requireWritesAfter("deleting", 10, time.Minute)
	if err := sb.Heal(ctx, ns, cut); err != nil {
		t.Fatal(err)
	}
	healed = true
	w.mark("healed")
	waitReconciled(t, ns, name, 4, 4*time.Minute)
	for _, m := range members(t, ns, name) {
		if m.Name == ms[0].Name || m.Name == ms[1].Name {
			t.Errorf("deleted member %s is still there", m.Name)
		}
	}
	w.mark("grown back")
	w.verify("grown back")
}
