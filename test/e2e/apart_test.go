package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/controller/cluster"
)

func init() { suiteNamespaces = append(suiteNamespaces, "e2e-apart") }

// TestMembersMovedApart: members that had to share a node (here every
// other node is cordoned, as after a recovery with the other nodes down)
// stay together while no node fits, and are moved apart one at a time
// once nodes come back, each move a replacement that joins before the
// member leaves: a writer keeps writing, every acknowledged write
// survives, and the leader stays where it is. It cordons nodes, so it
// runs alone, before the parallel suites.
func TestMembersMovedApart(t *testing.T) {
	ns := namespace(t, "e2e-apart")
	const name = "crowd"
	home, others := crowdOnOneNode(t, ns)
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Annotations = map[string]string{cluster.AnnotationMoveApartAfter: "20s"}
	})
	waitReconciled(t, ns, name, 3, 4*time.Minute)
	for m, p := range pods(t, ns, name) {
		if p.Spec.NodeName != home {
			t.Fatalf("member %s runs on %s with every node but %s cordoned", m, p.Spec.NodeName, home)
		}
	}
	apart := func() *metav1.Condition {
		return conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.MembersApart)
	}
	eventually(t, time.Minute, "MembersApart says no node fits", func() (bool, string) {
		c := apart()
		return c != nil && c.Reason == conditions.ReasonNoNodeFits, condString(c)
	})
	ids := memberIDs(t, ns, name)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 5, time.Minute)
	leader, err := leaderName(ns, name)
	if err != nil {
		t.Fatal(err)
	}

	// Two nodes come back: two members move, one at a time.
	w.mark("nodes back")
	for _, n := range others[:2] {
		if out, err := kubectl("uncordon", n); err != nil {
			t.Fatalf("uncordoning %s: %v\n%s", n, err, out)
		}
	}
	fewest := 3
	eventuallyEvery(t, time.Second, 8*time.Minute, "each member on a node of its own", func() (bool, string) {
		c := apart()
		if n := int(getCluster(t, ns, name).Status.ReadyMembers); n < fewest {
			fewest = n
		}
		return c != nil && c.Status == metav1.ConditionTrue, condString(c)
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("apart")
	w.requireWritesBetween("nodes back", "apart", 1)
	t.Logf("moving apart: longest write stall %s", w.longestStall("nodes back", "apart").Round(time.Millisecond))
	if fewest < 2 {
		t.Errorf("only %d voters were ready at one point; a quorum of 3 is 2", fewest)
	}
	checkMovedApart(t, ns, name, home, leader, ids)
	w.verify("apart")
}

// crowdOnOneNode cordons every schedulable node but one (not the
// operator's) for the test's duration, and returns that node and the
// cordoned ones that were schedulable.
func crowdOnOneNode(t *testing.T, ns string) (home string, others []string) {
	t.Helper()
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	operator := operatorNode(t)
	for _, n := range list.Items {
		switch {
		case n.Spec.Unschedulable || len(n.Spec.Taints) > 0:
		case home == "" && n.Name != operator:
			home = n.Name
		default:
			others = append(others, n.Name)
		}
	}
	if home == "" || len(others) < 2 {
		t.Fatalf("need a node for the members and two more, have %q and %v", home, others)
	}
	t.Cleanup(func() {
		release(t, ns)
		for _, n := range others {
			_, _ = kubectl("uncordon", n)
		}
	})
	for _, n := range others {
		if out, err := kubectl("cordon", n); err != nil {
			t.Fatalf("cordoning %s: %v\n%s", n, err, out)
		}
	}
	return home, others
}

// checkMovedApart checks the end of the moves: one member per node, two
// members replaced, the leader kept, and the last move recorded.
func checkMovedApart(t *testing.T, ns, name, home, leader string, ids map[string]string) {
	t.Helper()
	used := map[string]string{}
	for m, p := range pods(t, ns, name) {
		if o, taken := used[p.Spec.NodeName]; taken {
			t.Errorf("members %s and %s both run on %s", m, o, p.Spec.NodeName)
		}
		used[p.Spec.NodeName] = m
	}
	after := memberIDs(t, ns, name)
	kept := 0
	for m, id := range ids {
		if after[m] == id {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("members before %v, after %v: want exactly two replaced", ids, after)
	}
	if after[leader] != ids[leader] {
		t.Errorf("the leader %s was replaced (or etcd moved its leadership by itself meanwhile); members before %v, after %v", leader, ids, after)
	}
	if last := getCluster(t, ns, name).Status.LastMoveApart; last == nil || last.Node != home {
		t.Errorf("status.lastMoveApart %+v, want a move off %s", last, home)
	}
}
