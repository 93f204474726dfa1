package lifecycle

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// Issue 41, claim 7: partly lost data crash-looped forever. The first
// 4 KiB of every file of a member's data directory overwritten and its Pod
// deleted: etcd panicked at every start with a message that is no known
// data-loss signature, and the member said Lost=False ("can run as
// itself") for good. A member whose etcd keeps failing to start on its
// data is lost after a bounded number of failed starts in a row, with
// etcd's last words in its status, and replaced when quorum allows; damage
// the data guard recognises is refused and replaced at the first start.

// panicOnDamage is what etcd says at the start on a data directory whose
// files were overwritten: none of the signatures the operator knows.
const panicOnDamage = `{"level":"panic","msg":"failed to recover v3 backend from snapshot","error":"failed to find database snapshot file (snap: snapshot file doesn't exist)"}
panic: failed to recover v3 backend from snapshot
goroutine 1 [running]:
go.etcd.io/etcd/server/v3/etcdserver.recoverSnapshot(...)`

// crashLoopLimit mirrors the member controller's limit of failed starts in
// a row (crashLoopRestarts).
const crashLoopLimit = 5

// etcdRestarts is the restart count of the member's etcd container.
func (h *harness) etcdRestarts(member string) int32 {
	p := &corev1.Pod{}
	if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: member}, p); err != nil || len(p.Status.ContainerStatuses) == 0 {
		return 0
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// watchLost records, once each member first turns Lost, its condition and
// how often its etcd had restarted in its Pod then.
func (h *harness) watchLost(cluster string) (map[string]conditionSeen, func()) {
	seen := map[string]conditionSeen{}
	return seen, func() {
		for _, m := range h.members(cluster) {
			c := conditions.Get(m.Status.Conditions, conditions.Lost)
			if _, ok := seen[m.Name]; !ok && c != nil && c.Status == "True" {
				seen[m.Name] = conditionSeen{reason: c.Reason, message: c.Message, restarts: h.etcdRestarts(m.Name)}
			}
		}
	}
}

type conditionSeen struct {
	reason, message string
	restarts        int32
}

// The drill of the report: the Pod of the damaged member deleted too. Its
// new Pod, on the same claim, fails at every start; after the limit it is
// reported lost with etcd's reason and replaced, and the cluster converges
// on three members, none of them the damaged one under its old identity.
func TestCrashLoopingMemberIsReplaced(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	victim := h.follower("c")
	lost, watch := h.watchLost("c")
	h.afterCluster = watch
	h.damageData(victim.Name, damage{etcdSays: panicOnDamage})
	h.deletePod(victim.Name)
	h.run("replaced", func() bool { return gone(h, "c", victim.Name)() && h.converged("c", 3)() })

	seen, ok := lost[victim.Name]
	switch {
	case !ok:
		t.Fatal("the crash-looping member was replaced without being reported lost")
	case seen.reason != conditions.ReasonDataDirLost:
		t.Errorf("Lost reason %s, want %s", seen.reason, conditions.ReasonDataDirLost)
	case seen.restarts < crashLoopLimit:
		t.Errorf("reported lost after %d restarts, before the limit of %d", seen.restarts, crashLoopLimit)
	case !strings.Contains(seen.message, "failed to recover v3 backend from snapshot"):
		t.Errorf("the Lost message does not carry etcd's reason: %s", seen.message)
	}
	if len(lost) != 1 {
		t.Errorf("members reported lost: %v, want only %s", lost, victim.Name)
	}
	replaced := false
	for _, n := range h.events.notes(conditions.ReasonReplacingMember) {
		replaced = replaced || (strings.Contains(n, victim.Name) && strings.Contains(n, "in a row"))
	}
	if !replaced {
		t.Errorf("no replacement Event names the crash loop: %v", h.events.notes(conditions.ReasonReplacingMember))
	}
	if warned := h.events.notes(conditions.ReasonDataDirLost); len(warned) == 0 {
		t.Error("no Event reports the member lost")
	}
}

// Damage the data guard recognises (the backend missing, a log file that
// does not begin as etcd writes them) is refused at the first start: the
// member is lost at once, not after the crash-loop limit.
func TestGuardRefusedDamageIsReplacedAtOnce(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	victim := h.follower("c")
	lost, watch := h.watchLost("c")
	h.afterCluster = watch
	h.damageData(victim.Name, damage{etcdSays: panicOnDamage, guardSees: true})
	h.run("replaced", func() bool { return gone(h, "c", victim.Name)() && h.converged("c", 3)() })
	seen, ok := lost[victim.Name]
	switch {
	case !ok:
		t.Fatal("the refused member was replaced without being reported lost")
	case seen.restarts >= crashLoopLimit:
		t.Errorf("reported lost after %d restarts; the guard's refusal should count at once", seen.restarts)
	case !strings.Contains(seen.message, "damaged"):
		t.Errorf("the Lost message does not say the data is damaged: %s", seen.message)
	}
}

// Refusals. A member whose etcd failed fewer times in a row than the limit
// and then came up stays itself, and so does one that failed more often
// than the limit over its life but came up between the failures.
func TestFailedStartsBelowTheLimitKeepTheMember(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	victim := h.follower("c")
	lost, watch := h.watchLost("c")
	h.afterCluster = watch
	for round := 1; round <= 3; round++ {
		// Fewer failures in a row than the limit, then the damage goes
		// (a disk that came back, say) and etcd comes up.
		h.damageData(victim.Name, damage{etcdSays: panicOnDamage})
		want := h.etcdRestarts(victim.Name) + crashLoopLimit - 2
		h.run("failing", func() bool { return h.etcdRestarts(victim.Name) >= want })
		delete(h.damaged, victim.Name)
		h.run("back", func() bool { return podReadyNow(h, victim.Name) && h.converged("c", 3)() })
	}
	if n := h.etcdRestarts(victim.Name); n <= crashLoopLimit {
		t.Fatalf("the member's etcd restarted %d times, want more than the limit of %d over the test", n, crashLoopLimit)
	}
	h.steps(10)
	if gone(h, "c", victim.Name)() || len(lost) > 0 {
		t.Fatalf("a member whose etcd came up between its failures was reported lost (%v) or replaced:\n%s", lost, h.dump())
	}
}

// Two of three members crash-loop: both are reported lost, but neither is
// replaced while the cluster has no quorum (removing either would leave
// the cluster without one). Once one of them comes back, the other is
// replaced.
func TestCrashLoopingMembersWithoutQuorumAreNotReplaced(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	ms := h.members("c")[1:]
	for _, m := range ms {
		h.damageData(m.Name, damage{etcdSays: panicOnDamage})
	}
	h.run("both reported lost", func() bool {
		for _, m := range ms {
			if !conditions.IsTrue(h.memberNamed(m.Name).Status.Conditions, conditions.Lost) {
				return false
			}
		}
		return true
	})
	ids := map[uint64]bool{}
	for _, em := range h.etcd.Members() {
		ids[em.ID] = true
	}
	h.steps(60)
	for _, m := range ms {
		if gone(h, "c", m.Name)() {
			t.Fatalf("member %s was replaced while the cluster had no quorum:\n%s", m.Name, h.dump())
		}
		if id, _ := etcd.ParseID(m.Status.MemberID); !ids[id] || len(h.etcd.Members()) != 3 {
			t.Fatalf("etcd's membership changed while the cluster had no quorum:\n%s", h.dump())
		}
	}
	delete(h.damaged, ms[0].Name)
	h.run("the other replaced", func() bool { return gone(h, "c", ms[1].Name)() && h.converged("c", 3)() })
	if gone(h, "c", ms[0].Name)() {
		t.Errorf("member %s, back up, was replaced too", ms[0].Name)
	}
	if c := conditions.Get(h.memberNamed(ms[0].Name).Status.Conditions, conditions.Lost); c == nil || c.Status != "False" {
		t.Errorf("member %s came back but is still reported lost: %v", ms[0].Name, c)
	}
}
