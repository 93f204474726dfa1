package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// TestLeaderHandsOverBeforeRemoval removes the leader twice, with a writer
// running: once through the operator (a scale down whose victim leads: the
// operator moves leadership to a member that stays before it removes the
// leader), and once directly with etcd's MemberRemove, as an operator
// without the hand-over would (the cluster then elects a new leader, and the
// operator replaces the removed member). Both keep every acknowledged write;
// the stall of each is reported (make bench compares them).
func TestLeaderHandsOverBeforeRemoval(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-leader")
	const name = "leader"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	with, without := leaderRemovalStalls(t, w, ns, name)
	t.Logf("longest write stall removing the leader: %s with the hand-over, %s without", with.Round(time.Millisecond), without.Round(time.Millisecond))
	w.verify("without hand-over done")
}

// leaderRemovalStalls runs both removals on a reconciled 3-member cluster
// and returns the longest write stall of each.
func leaderRemovalStalls(t *testing.T, w *writer, ns, name string) (with, without time.Duration) {
	t.Helper()
	victim := leadNewest(t, ns, name)
	settleAfterMove(w, "led before the hand-over")
	w.mark("with hand-over")
	setReplicas(t, ns, name, 2)
	waitReconciled(t, ns, name, 2, 3*time.Minute)
	w.mark("with hand-over done")
	w.requireWritesBetween("with hand-over", "with hand-over done", 1)
	if !eventRecorded(t, ns, "LeadershipMoved", victim) {
		t.Errorf("no LeadershipMoved Event for %s: the operator removed the leader without handing over", victim)
	}

	setReplicas(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	victim = leadNewest(t, ns, name)
	settleAfterMove(w, "led before the direct removal")
	w.mark("without hand-over")
	removeDirectly(t, ns, name, victim)
	waitReplaced(t, ns, name, victim, 3, 3*time.Minute)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("without hand-over done")
	return w.longestStall("with hand-over", "with hand-over done"), w.longestStall("without hand-over", "without hand-over done")
}

// settleAfterMove waits until the writer's writes are acknowledged again
// after the leadership was moved to the member about to be removed: a write
// that the move held up (a proposal forwarded while the leadership passes
// is dropped, and the client waits out its timeout) must not be counted in
// the removal's stall. The writer writes one at a time, so once it has
// written after the mark, nothing from before it is in flight.
func settleAfterMove(w *writer, mark string) {
	w.mark(mark)
	w.requireWritesAfter(mark, 3, time.Minute)
}

// leadNewest moves etcd's leadership to the newest member, which a scale
// down removes first, and returns its name.
func leadNewest(t *testing.T, ns, name string) string {
	t.Helper()
	ms := members(t, ns, name)
	newest := ms[len(ms)-1]
	target, err := etcd.ParseID(newest.Status.MemberID)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "leadership moved to "+newest.Name, func() (bool, string) {
		leader, err := leaderName(ns, name)
		if err != nil || leader == newest.Name {
			return err == nil, fmt.Sprint(leader, err)
		}
		c, err := dialCluster(ns, name, []string{clientURLOf(ns, name, leader)})
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.MoveLeader(ctx, target)
		return false, fmt.Sprint(err)
	})
	return newest.Name
}

// leaderName asks the members which of them leads.
func leaderName(ns, name string) (string, error) {
	c, err := clusterClient(ns, name)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ep := range c.Endpoints() {
		st, err := c.Status(ctx, ep)
		if err != nil {
			continue
		}
		list, err := c.MemberList(ctx)
		if err != nil {
			return "", err
		}
		for _, m := range list.Members {
			if m.ID == st.Leader {
				return m.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no member names a leader")
}

func clientURLOf(ns, cluster, member string) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:2379", member, cluster, ns)
}

// removeDirectly removes a member with etcd's own MemberRemove.
func removeDirectly(t *testing.T, ns, name, member string) {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.Name == member {
			// etcd refuses a removal while a voter has been connected for
			// less than 5 s (a member that just joined or restarted), as
			// it would refuse anyone: wait that out.
			eventually(t, time.Minute, "etcd removes "+member, func() (bool, string) {
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer rcancel()
				_, err := c.MemberRemove(rctx, m.ID)
				if err != nil && !errors.Is(etcd.Classify(err), etcd.ErrUnhealthy) {
					t.Fatal(err)
				}
				return err == nil, fmt.Sprint(err)
			})
			return
		}
	}
	t.Fatalf("%s is not in etcd's membership", member)
}

// eventRecorded reports whether an Event of the reason mentions the text
// ("" asks for any Event of the reason: it is false when there is none).
func eventRecorded(t *testing.T, ns, reason, text string) bool {
	t.Helper()
	out, err := kubectl("-n", ns, "get", "events", "--field-selector", "reason="+reason, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if err != nil {
		t.Fatalf("listing events: %v\n%s", err, out)
	}
	for _, message := range strings.Split(out, "\n") {
		if message != "" && strings.Contains(message, text) {
			return true
		}
	}
	return false
}
