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
// running. Deleted members that serve are replaced before they leave: no
// replacement can join while a voter is cut off, so both stay in etcd (the
// cluster says what it waits for) and writes go on. Once the cut is healed
// two new members join, the deleted ones leave one at a time, and the
// cluster is four again.
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
	// Both deleted members serve, so they wait for their replacements;
	// none can join while a voter is cut off (etcd adds members only with
	// every voter connected), and the cluster says what it waits for.
	eventually(t, 2*time.Minute, "the replacements wait for "+cut, func() (bool, string) {
		p := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Progressing)
		return p != nil && strings.Contains(p.Message, cut), condString(p)
	})
	list, err := etcdMemberList(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 4 {
		t.Fatalf("etcd has %d members: a deleted member left before its replacement joined", len(list))
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
