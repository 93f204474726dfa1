package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// leaderCutOff is a healthy 3-member cluster whose leader m0 serves its
// peers but not the operator (its client port cut): m1 and m2 answer and
// follow it in its term.
func leaderCutOff(mods ...func(*world)) *world {
	return healthyWorld(3, func(w *world) {
		w.etcd.leader, w.etcd.list = nil, nil
		delete(w.etcd.status, "m0")
		w.etcd.statusErr["m0"] = context.DeadlineExceeded
		for _, mod := range mods {
			mod(w)
		}
	})
}

func reported(w *world) *world {
	p := decide(w)
	setAvailable(w, p)
	setDegraded(w, p)
	return w
}

// Claim 1 of issue 41: "quorum lost" meant "the operator cannot reach a
// leader". Each row is a cluster with a quorum, or one not leaderless for
// long enough: none may be called quorum-less, and none may be offered a
// recovery plan.
func TestQuorumIsNotCalledLostWithoutTheMembersSayingSo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		w         *world
		available string
		degraded  string
	}{
		{name: "the leader's client port is cut; its followers name it", w: leaderCutOff(),
			available: conditions.ReasonQuorumAvailable, degraded: conditions.ReasonLeaderUnreachable},
		{name: "the leader and one follower do not answer; the other follower names the leader", w: leaderCutOff(func(w *world) {
			delete(w.etcd.status, "m1")
			w.etcd.statusErr["m1"] = context.DeadlineExceeded
		}), available: conditions.ReasonLeaderUnreachable, degraded: conditions.ReasonLeaderUnreachable},
		{name: "the operator reaches no member; every Pod is Ready", w: healthyWorld(3, func(w *world) {
			w.etcd.leader, w.etcd.list, w.etcd.err = nil, nil, errors.New("dial: i/o timeout")
			for _, n := range []string{"m0", "m1", "m2"} {
				delete(w.etcd.status, n)
				w.etcd.statusErr[n] = w.etcd.err
			}
		}), available: conditions.ReasonClusterUnreachable},
		{name: "one member answers without a leader; the voters it cannot reach have Ready Pods", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			for _, n := range []string{"m1", "m2"} {
				w.pods[n].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			}
		}), available: conditions.ReasonClusterUnreachable},
		{name: "no leader for less than the grace (an election)", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			w.cluster.Status.NoLeaderSince = &metav1.Time{Time: t0.Add(-quorumLossGrace / 2)}
		}), available: conditions.ReasonNoLeader},
		{name: "no leader first seen in this pass", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			w.cluster.Status.NoLeaderSince = nil
		}), available: conditions.ReasonNoLeader},
	} {
		t.Run(tc.name, func(t *testing.T) { checkNotQuorumLoss(t, tc.w, tc.available, tc.degraded) })
	}
}

// checkNotQuorumLoss: the world is not called quorum-less, reports the
// reasons given, and a dry run on it is answered NotNeeded.
func checkNotQuorumLoss(t *testing.T, w *world, available, degraded string) {
	t.Helper()
	if reported(w); quorumLost(w) {
		t.Fatal("called quorum-less")
	}
	if c := conditions.Get(w.cluster.Status.Conditions, conditions.Available); c == nil || c.Reason != available {
		t.Errorf("Available %+v, want reason %s", c, available)
	}
	if c := conditions.Get(w.cluster.Status.Conditions, conditions.Degraded); degraded != "" && (c == nil || c.Reason != degraded) {
		t.Errorf("Degraded %+v, want reason %s", c, degraded)
	}
	w.cluster.Annotations = map[string]string{manifest.AnnotationRecover: manifest.RecoverDryRun}
	if p := decide(w); p.recovery == nil || p.recovery.Phase != v1alpha2.RecoveryNotNeeded || p.change != nil {
		t.Errorf("a dry run answered %+v, change %+v", p.recovery, p.change)
	}
}

// The followers of a leader the operator cannot reach are healthy (judged
// against the leader they name); the leader itself is not counted.
func TestFollowersOfAnUnreachableLeaderAreHealthy(t *testing.T) {
	w := leaderCutOff()
	for name, want := range map[string]bool{"m0": false, "m1": true, "m2": true} {
		if got := w.healthy(member(w, name)); got != want {
			t.Errorf("%s healthy %v, want %v", name, got, want)
		}
	}
	// A follower that names an older term is not.
	w = leaderCutOff(func(w *world) { w.etcd.status["m2"].RaftTerm = 4 })
	if w.healthy(member(w, "m2")) {
		t.Error("a follower of an older term counts as healthy")
	}
}

// The grace starts when no leader is first seen, is kept from pass to
// pass, ends with any leader named, and brings the pass back when it runs
// out.
func TestNoLeaderSince(t *testing.T) {
	w := lostQuorumWorld(manifest.RecoverDryRun, func(w *world) { w.cluster.Status.NoLeaderSince = nil })
	if got := noLeaderSince(w); got == nil || !got.Time.Equal(t0) {
		t.Fatalf("first leaderless pass: %v", got)
	}
	d := requeue(w, plan{}, outcome{})
	if d == 0 || d > quorumLossGrace+time.Second {
		t.Errorf("the pass comes back in %s, want by the end of the grace", d)
	}
	w.cluster.Status.NoLeaderSince = &metav1.Time{Time: t0.Add(-quorumLossGrace)}
	if !quorumLost(w) {
		t.Error("leaderless for the grace: not called lost")
	}
	if got := noLeaderSince(leaderCutOff(func(w *world) { w.cluster.Status.NoLeaderSince = &metav1.Time{Time: t0.Add(-time.Hour)} })); got != nil {
		t.Errorf("a leader named: since %v", got)
	}
}

// Claim 2 of issue 41: a token is consent to one plan, made at one time,
// for a bounded window, once.
func TestRecoveryTokenIsNotReplayed(t *testing.T) {
	dry := decide(lostQuorumWorld(manifest.RecoverDryRun)).recovery
	if dry.ExpiryTime == nil || !dry.ExpiryTime.Time.Equal(t0.Add(tokenValidity)) {
		t.Fatalf("the plan's expiry: %v", dry.ExpiryTime)
	}
	later := func(d time.Duration) func(*world) {
		return func(w *world) {
			w.now = t0.Add(d)
			w.cluster.Status.NoLeaderSince = &metav1.Time{Time: w.now.Add(-time.Minute)}
		}
	}
	for _, tc := range []struct {
		name string
		w    *world
	}{
		// A replay comes later than the plan it was given for.
		{name: "no plan was recorded before the token", w: lostQuorumWorld(dry.Token, later(time.Minute))},
		{name: "the plan expired", w: lostQuorumWorld(dry.Token, planned(dry), later(tokenValidity+time.Second))},
		{name: "the token was answered NotNeeded", w: lostQuorumWorld(dry.Token, later(time.Minute), func(w *world) {
			w.cluster.Status.Recovery = &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryNotNeeded, Request: dry.Token}
		})},
		{name: "the token's recovery completed", w: lostQuorumWorld(dry.Token, later(time.Hour), func(w *world) {
			rec := withPhase(dry, v1alpha2.RecoveryCompleted, "")
			w.cluster.Status.Recovery = rec
		})},
		{name: "the same plan made again later", w: lostQuorumWorld(dry.Token, later(time.Hour), func(w *world) {
			w.cluster.Status.Recovery = decide(lostQuorumWorld(manifest.RecoverDryRun, later(time.Hour))).recovery
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(tc.w)
			if p.change != nil {
				t.Fatalf("a replayed token made %s", p.change.kind)
			}
			if p.recovery == nil || p.recovery.Phase != v1alpha2.RecoveryPlanned || p.recovery.Token == dry.Token {
				t.Errorf("answered %+v, want a new plan with a new token", p.recovery)
			}
		})
	}
	// The plan's own token, before its expiry, is consent.
	if p := decide(lostQuorumWorld(dry.Token, planned(dry), later(tokenValidity-time.Second))); p.recovery == nil || p.recovery.Phase != v1alpha2.RecoveryFencing {
		t.Errorf("the current plan's token: %+v", p.recovery)
	}
}

// Claim 3 of issue 41: the survivor's mark, put by anyone but the operator
// after a consent, is taken off and never acted on.
func TestForceMarkWithoutConsentIsRemoved(t *testing.T) {
	dry := decide(lostQuorumWorld(manifest.RecoverDryRun)).recovery
	mark := func(name, value string) func(*world) {
		return func(w *world) {
			member(w, name).Annotations = map[string]string{manifest.AnnotationForceNewCluster: value}
		}
	}
	for _, tc := range []struct {
		name string
		w    *world
	}{
		{name: "on a follower of a healthy cluster", w: healthyWorld(3, mark("m1", "true"))},
		{name: "on the Pod only, of a healthy cluster", w: healthyWorld(3, func(w *world) {
			w.pods["m1"].Annotations[manifest.AnnotationForceNewCluster] = "true"
		})},
		{name: "during a quorum loss, with no plan", w: lostQuorumWorld(manifest.RecoverDryRun, mark("m0", "true"))},
		{name: "with the plan's token but no consent", w: lostQuorumWorld(manifest.RecoverDryRun, planned(dry), mark("m0", dry.Token))},
		{name: "consented, but no member fenced yet", w: lostQuorumWorld(dry.Token, planned(dry), mark("m0", dry.Token))},
		{name: "fencing, with the consent taken back", w: lostQuorumWorld(manifest.RecoverDryRun, planned(withPhase(dry, v1alpha2.RecoveryFencing, "")), mark("m0", dry.Token))},
		{name: "on a member the plan discards", w: lostQuorumWorld(dry.Token, planned(dry), mark("m1", dry.Token))},
		{name: "holding another token", w: lostQuorumWorld(dry.Token, planned(dry), mark("m0", "0123456789ab"))},
		{name: "after the recovery completed", w: healthyWorld(3, mark("m0", dry.Token), func(w *world) {
			w.cluster.Status.Recovery = withPhase(dry, v1alpha2.RecoveryCompleted, "")
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(tc.w)
			if p.change == nil || p.change.kind != clearForce || p.change.reason != conditions.ReasonForceMarkRemoved {
				t.Fatalf("change %+v, want the mark taken off", p.change)
			}
			if !strings.Contains(p.change.message, "Only the operator marks") {
				t.Errorf("message %q", p.change.message)
			}
			if p.recoverySet && p.recovery != nil && p.recovery.Phase == v1alpha2.RecoveryForcingNewCluster {
				t.Errorf("recovery %+v", p.recovery)
			}
		})
	}
	// The operator's own mark, made once the discarded members were
	// fenced, before it wrote the phase (it stopped in between), is
	// carried on.
	w := lostQuorumWorld(dry.Token, planned(withPhase(dry, v1alpha2.RecoveryFencing, "")), mark("m0", dry.Token))
	if p := decide(w); p.change == nil || p.change.kind != forceNewCluster || p.recovery.Phase != v1alpha2.RecoveryForcingNewCluster {
		t.Errorf("the operator's own mark: %+v %+v", p.change, p.recovery)
	}
}

// Claim 4 of issue 41 (in part): what a plan knows of the members that no
// longer answer outlives the operator process. The reports it had when the
// cluster became leaderless are kept in the status, and a restarted
// operator (no reports of its own) plans with them.
func TestLastReportsOutliveTheOperator(t *testing.T) {
	w := lostQuorumWorld(manifest.RecoverDryRun)
	kept := lastReports(w)
	if len(kept) != 1 || kept[0].Name != "m1" || kept[0].AppliedIndex != 990 {
		t.Fatalf("kept %+v", kept)
	}
	restarted := lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
		w.cluster.Status.LastReports = kept
		w.seen = withRecorded(map[string]seenReport{"m0": {applied: 1000, at: t0}}, kept)
	})
	rec := decide(restarted).recovery
	var m1 *v1alpha2.RecoveryMember
	for i := range rec.Discarded {
		if rec.Discarded[i].Name == "m1" {
			m1 = &rec.Discarded[i]
		}
	}
	if m1 == nil || m1.AppliedIndex == nil || *m1.AppliedIndex != 990 || m1.LastSeen == nil {
		t.Errorf("after a restart the plan knows of m1: %+v", m1)
	}
	// A pass that could not dial etcd keeps them; a leader named clears them.
	undialled := lostQuorumWorld(manifest.RecoverDryRun, func(w *world) { w.seen, w.cluster.Status.LastReports = nil, kept })
	if got := lastReports(undialled); len(got) != 1 {
		t.Errorf("an undialled pass keeps %+v", got)
	}
	if got := lastReports(leaderCutOff(func(w *world) { w.cluster.Status.LastReports = kept })); got != nil {
		t.Errorf("with a leader named: %+v", got)
	}
}

// Claim 6 of issue 41 (its second half): a survivor that does not come up
// leaves the recovery waiting, and the record says, after a while, what is
// left and what to do.
func TestStuckSurvivorIsReported(t *testing.T) {
	dry := decide(lostQuorumWorld(manifest.RecoverDryRun)).recovery
	forcing := withPhase(dry, v1alpha2.RecoveryForcingNewCluster, "")
	forcing.StartTime = &metav1.Time{Time: t0.Add(-survivorPatience - time.Minute)}
	w := lostQuorumWorld(dry.Token, planned(forcing), func(w *world) {
		member(w, "m0").Annotations = map[string]string{manifest.AnnotationForceNewCluster: dry.Token}
		w.pods["m0"].Annotations[manifest.AnnotationForceNewCluster] = "true"
	})
	p := decide(w)
	if p.change != nil || p.recovery.Phase != v1alpha2.RecoveryForcingNewCluster || !strings.Contains(p.recovery.Message, "nothing has been deleted yet") {
		t.Errorf("%+v, change %+v", p.recovery, p.change)
	}
}

// While the cluster stays leaderless, a member that answers applies
// nothing, and its kept report does not change from pass to pass: a pass
// writes no status (a write would wake the next pass at once).
func TestLastReportsAreStableWhileLeaderless(t *testing.T) {
	first := lostQuorumWorld(manifest.RecoverDryRun, func(w *world) { w.seen["m0"] = seenReport{applied: 1000, at: t0} })
	kept := lastReports(first)
	later := lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
		w.now = t0.Add(time.Minute)
		w.seen["m0"] = seenReport{applied: 1000, at: w.now}
		w.cluster.Status.LastReports = kept
	})
	if got := lastReports(later); !equality.Semantic.DeepEqual(got, kept) {
		t.Errorf("a pass a minute later keeps %+v, had %+v", got, kept)
	}
}

// A cluster with a long election timeout gets a longer grace: ten of its
// timeouts, never less than quorumLossGrace.
func TestLossGraceFollowsTheElectionTimeout(t *testing.T) {
	slow := func(ms int32) func(*world) {
		return func(w *world) {
			w.cluster.Status.Observed.Options = &v1alpha2.EtcdOptions{ElectionTimeout: ptr.To(ms)}
			w.cluster.Status.NoLeaderSince = &metav1.Time{Time: t0.Add(-30 * time.Second)}
		}
	}
	if w := lostQuorumWorld(manifest.RecoverDryRun, slow(1000)); lossGrace(w) != quorumLossGrace || !quorumLost(w) {
		t.Errorf("a 1s election timeout: grace %s, lost %t after 30s", lossGrace(w), quorumLost(w))
	}
	w := lostQuorumWorld(manifest.RecoverDryRun, slow(5000))
	if lossGrace(w) != 50*time.Second {
		t.Errorf("a 5s election timeout: grace %s, want 50s", lossGrace(w))
	}
	if quorumLost(w) {
		t.Error("leaderless for 30s with 5s elections: called lost within six election timeouts")
	}
	if d := quorumLossTimer(w); d == nil || *d != 20*time.Second {
		t.Errorf("the pass comes back in %v, want 20s (at the end of the grace)", d)
	}
}
