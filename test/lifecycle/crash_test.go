package lifecycle

import (
	"context"
	"fmt"
	"testing"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/controller/cluster"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// scenario is a change driven to completion from a converged start.
type scenario struct {
	name   string
	start  int32 // replicas to converge on first (0: start from nothing)
	target int32
	// version, if set, is the etcd version the cluster starts on.
	version string
	// disrupt, if set, is what happens instead of a replicas change.
	disrupt func(h *harness)
	// check, if set, is checked once the scenario converged.
	check func(h *harness)
	// peerTLS runs the cluster's peer plane from a Secret; auth turns on
	// etcd authentication.
	peerTLS, auth bool
	// noPassword starts an auth cluster before its root password Secret
	// exists: it converges but cannot enable authentication yet.
	noPassword bool
	// finished, if set, must hold too for the scenario to be done (for
	// work that leaves the cluster converged throughout).
	finished func(h *harness) bool
	// crowded starts the cluster with every node but one cordoned, so its
	// members share that node, and lets it move them apart at once.
	crowded bool
}

// TestCrashBetweenAnyTwoCalls kills the operator right after each mutating
// call (API write or etcd membership change) of a scenario, restarts it with
// no memory, and checks that the cluster still converges with etcd's
// membership exactly matching the members.
func TestCrashBetweenAnyTwoCalls(t *testing.T) {
	for _, sc := range crashScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			calls := countCalls(t, sc)
			if calls == 0 {
				t.Fatalf("no mutating call in the scenario; the harness is not counting")
			}
			for k := 1; k <= calls; k++ {
				t.Run(fmt.Sprintf("crash after call %d of %d", k, calls), func(t *testing.T) {
					t.Parallel()
					crashAfter(t, sc, k)
				})
			}
		})
	}
}

// crashScenarios are the changes the crash suite drives.
func crashScenarios() []scenario {
	return []scenario{
		{name: "bootstrap 3", start: 0, target: 3},
		{name: "scale 1 to 3", start: 1, target: 3},
		{name: "scale 1 to 3, each joiner publishing itself 6 s after it started", start: 1, target: 3, disrupt: func(h *harness) {
			publishLate(h, 6)
			h.setReplicas("c", 3)
		}},
		{name: "scale 3 to 1", start: 3, target: 1},
		{name: "pause 3 to 0", start: 3, target: 0},
		{name: "scale 3 to 2, the leader leaving", start: 3, target: 2, disrupt: func(h *harness) {
			id, _ := etcd.ParseID(newest(h.members("c")).Status.MemberID)
			h.moveLeaderTo(id)
			h.setReplicas("c", 2)
		}},
		{name: "replace a member whose node died", start: 3, target: 3, disrupt: func(h *harness) {
			h.stopNode(h.nodeOf(h.members("c")[1].Name))
		}},
		{name: "roll 3 members to the next minor", start: 3, target: 3, version: "3.5.35", disrupt: func(h *harness) {
			h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
		}, check: restartedOnce},
		{name: "roll 3 members onto a rotated Secret", start: 3, target: 3, peerTLS: true, disrupt: func(h *harness) {
			h.putPeerSecret(with(peerMaterial, "tls.crt", "cert 2"))
		}, check: restartedOnce},
		{name: "hand the peer plane over to cert-manager", start: 3, target: 3, peerTLS: true, disrupt: handOverPeer,
			finished: handedOver, check: restartedThrice},
		{name: "enable authentication", start: 3, target: 3, auth: true, noPassword: true, disrupt: func(h *harness) {
			h.putPassword("first")
		}, check: func(h *harness) {
			h.run("auth latched", h.authConverged(3, "first"))
		}},
		{name: "change the root password", start: 3, target: 3, auth: true, disrupt: func(h *harness) {
			h.putPassword("second")
		}, check: func(h *harness) {
			h.run("password applied", h.authConverged(3, "second"))
		}},
		{name: "a downgrade left enabled in etcd is cancelled", start: 3, target: 3, disrupt: func(h *harness) {
			c, err := h.etcd.Dialer()(context.Background(), etcd.Config{Endpoints: []string{manifest.ClientURL(&h.members("c")[0])}})
			if err != nil {
				h.t.Fatal(err)
			}
			if _, err := c.Downgrade(context.Background(), etcd.DowngradeEnable, "3.5.0"); err != nil {
				h.t.Fatal(err)
			}
		}},
		{name: "every member deleted by a user", start: 3, target: 3, disrupt: func(h *harness) {
			for _, m := range h.members("c") {
				if err := h.c.Delete(context.Background(), &m); err != nil {
					h.t.Fatal(err)
				}
			}
		}},
		{name: "defragment 3 members, the leader last, NOSPACE disarmed", start: 3, target: 3, disrupt: func(h *harness) {
			h.fragment("c", 300*mib, 50*mib)
			f := h.follower("c")
			h.etcd.RaiseAlarm(manifest.PeerURL(&f), etcd.AlarmNoSpace)
			h.createDefrag("d", "c")
		}, finished: func(h *harness) bool { return h.defragFinished("d")() }, check: defragmentedOnceEach},
		{name: "recover from quorum loss", start: 3, target: 3, disrupt: func(h *harness) {
			h.recoverWithConsent("c")
		}, finished: recovered},
		{name: "move a member off the node all three share", start: 3, target: 3, crowded: true, disrupt: func(h *harness) {
			h.cordon(false, nodeNames[1])
		}, finished: movedOff, check: startedOnce},
		{name: "members deleted by a user", start: 3, target: 3, disrupt: func(h *harness) {
			for _, m := range h.members("c")[:2] {
				if err := h.c.Delete(context.Background(), &m); err != nil {
					h.t.Fatal(err)
				}
			}
		}},
	}
}

// restartedOnce checks that a roll resumed without restarting members
// already done: each had its original Pod and one more.
func restartedOnce(h *harness) {
	for name, n := range h.incarnations() {
		if n > 2 {
			h.t.Errorf("member %s was started %d times in a roll of one restart each", name, n)
		}
	}
}

// defragmentedOnceEach checks that a run resumed after a crash reports
// what a run without one does: every member defragmented, with the size it
// had before the first Defragment call, the leader last, and no alarm left.
func defragmentedOnceEach(h *harness) {
	d := h.getDefrag("d")
	if d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmented != 3 {
		h.t.Fatalf("run ended %s with %d defragmented: %+v", d.Status.Phase, d.Status.Defragmented, d.Status.Conditions)
	}
	for i, r := range d.Status.Members {
		if r.Outcome != v1alpha2.DefragOutcomeDefragmented || r.DBSizeBefore != 300*mib || r.ReclaimedBytes != 250*mib {
			h.t.Errorf("member row %+v", r)
		}
		if (i == len(d.Status.Members)-1) != (r.Role == v1alpha2.DefragRoleLeader) {
			h.t.Errorf("the leader is not last: %+v", d.Status.Members)
		}
	}
	if a := h.etcd.Alarms(); len(a) != 0 {
		h.t.Errorf("alarms left: %v", a)
	}
}

// crashAfter runs the scenario with the operator dying after its k-th
// mutating call.
func crashAfter(t *testing.T, sc scenario, k int) {
	h := prepared(t, sc)
	h.restart(k)
	h.setReplicasOrCreate(sc)
	h.run("converge after crash", h.done(sc))
	if !h.crashed {
		t.Fatalf("the crash after call %d never happened", k)
	}
	if sc.check != nil {
		sc.check(h)
	}
}

func prepared(t *testing.T, sc scenario) *harness {
	h := newHarness(t)
	// A process killed after etcd removed a member, before it noted that,
	// leaves the next one nothing to know it by.
	h.mayAskRemoved = true
	if sc.peerTLS {
		h.putPeerSecret(peerMaterial)
	}
	if sc.auth && !sc.noPassword {
		h.putPassword("first")
	}
	if sc.crowded {
		h.cordon(true, nodeNames[1:]...)
	}
	if sc.start > 0 {
		h.createCluster("c", sc.start, func(c *v1alpha2.EtcdCluster) {
			if sc.crowded {
				c.Annotations = map[string]string{cluster.AnnotationMoveApartAfter: "0s"}
			}
			if sc.version != "" {
				c.Spec.Version = sc.version
			}
			if sc.peerTLS {
				withPeerTLS(c)
			}
			if sc.auth {
				withAuth(c)
			}
		})
		h.run("start", h.started(sc))
	}
	return h
}

// started says when the scenario's starting cluster is there.
func (h *harness) started(sc scenario) func() bool {
	if sc.noPassword {
		// Converged but for authentication, which waits for the password.
		return func() bool { return h.getCluster("c").Status.ReadyMembers == sc.start && h.etcdMatches("c") == nil }
	}
	return h.converged("c", int(sc.start))
}

func (h *harness) setReplicasOrCreate(sc scenario) {
	if sc.disrupt != nil {
		sc.disrupt(h)
		return
	}
	if sc.start == 0 {
		h.createCluster("c", sc.target, func(c *v1alpha2.EtcdCluster) {
			if sc.auth {
				withAuth(c)
			}
		})
		return
	}
	h.setReplicas("c", sc.target)
}

func (h *harness) done(sc scenario) func() bool {
	if sc.finished != nil {
		converged := h.converged("c", int(sc.target))
		return func() bool { return converged() && sc.finished(h) }
	}
	if sc.target > 0 {
		return h.converged("c", int(sc.target))
	}
	return func() bool {
		ms := h.members("c")
		return len(ms) == 1 && ms[0].Spec.Dormant && len(h.pods()) == 0 && len(h.etcd.Members()) == 1
	}
}

func countCalls(t *testing.T, sc scenario) int {
	h := prepared(t, sc)
	before := h.mutations
	h.setReplicasOrCreate(sc)
	h.run("clean run", h.done(sc))
	return h.mutations - before
}

// publishLate makes every member that joins from now on publish itself
// through raft only after it has run for the given steps, as a learner that
// caught up from the leader's snapshot does on real nodes: it is promoted,
// and the next one added, before its client port serves. The client
// Service is checked at every step.
func publishLate(h *harness, steps int) {
	h.etcd.PublishLate, h.checkClientEndpoints = true, true
	age := map[string]int{}
	h.afterCluster = func() {
		for _, peer := range h.etcd.Publishing() {
			if age[peer]++; age[peer] >= steps {
				h.etcd.Publish(peer)
			}
		}
	}
}

// movedOff: one member moved to the node that came back, and the
// operator says no other node fits the two still sharing one.
func movedOff(h *harness) bool {
	nodes := map[string]bool{}
	for _, m := range h.members("c") {
		if m.DeletionTimestamp != nil {
			return false
		}
		nodes[h.nodeOf(m.Name)] = true
	}
	c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.MembersApart)
	return len(nodes) == 2 && nodes[nodeNames[1]] && c != nil && c.Reason == conditions.ReasonNoNodeFits
}

// startedOnce checks that no member was started twice: a move replaces a
// member, it never restarts one.
func startedOnce(h *harness) {
	for name, n := range h.incarnations() {
		if n > 1 {
			h.t.Errorf("member %s was started %d times", name, n)
		}
	}
}
