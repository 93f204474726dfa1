package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// lostQuorumWorld is a 3-member cluster whose m1 and m2 answer nothing; m0
// answers without a leader at the given applied index, and optionally m1
// answers too at its own.
func lostQuorumWorld(request string, mods ...func(*world)) *world {
	return healthyWorld(3, func(w *world) {
		w.cluster.Annotations = map[string]string{manifest.AnnotationRecover: request}
		w.etcd.list, w.etcd.leader, w.etcd.err = nil, nil, errors.New("context deadline exceeded")
		for _, n := range []string{"m1", "m2"} {
			delete(w.etcd.status, n)
			w.etcd.statusErr[n] = errors.New("connection refused")
			w.pods[n].Status.Conditions = nil
		}
		w.etcd.status["m0"].Leader = 0
		w.pods["m0"].Status.Conditions = nil
		w.seen = map[string]seenReport{"m1": {applied: 990, at: t0.Add(-time.Minute)}}
		// Leaderless for longer than the grace.
		w.cluster.Status.NoLeaderSince = &metav1.Time{Time: t0.Add(-time.Minute)}
		for _, mod := range mods {
			mod(w)
		}
	})
}

func TestRecoveryPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		w        *world
		phase    string
		survivor string
		change   changeKind
		message  string
	}{
		{name: "a healthy cluster needs none", w: healthyWorld(3, func(w *world) {
			w.cluster.Annotations = map[string]string{manifest.AnnotationRecover: manifest.RecoverDryRun}
		}), phase: v1alpha2.RecoveryNotNeeded},
		{name: "the dry run plans and changes nothing", w: lostQuorumWorld(manifest.RecoverDryRun), phase: v1alpha2.RecoveryPlanned, survivor: "m0",
			message: "recover="},
		{name: "the highest applied index survives", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			st := *w.etcd.status["m0"]
			st.MemberID, st.RaftAppliedIndex = 0x12, 1200
			w.etcd.status["m2"] = &st
			delete(w.etcd.statusErr, "m2")
		}), phase: v1alpha2.RecoveryPlanned, survivor: "m2"},
		{name: "a higher index last seen on a discarded member is warned about", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			w.seen["m1"] = seenReport{applied: 5000, at: t0}
		}), phase: v1alpha2.RecoveryPlanned, survivor: "m0", message: "writes only they applied will be lost"},
		{name: "a memory-backed member cannot survive a restart", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			member(w, "m0").Spec.Storage.Medium = v1alpha2.StorageMediumMemory
		}), phase: v1alpha2.RecoveryRefused, message: "keeps its data in memory"},
		{name: "nobody answers", w: lostQuorumWorld(manifest.RecoverDryRun, func(w *world) {
			delete(w.etcd.status, "m0")
			w.etcd.statusErr["m0"] = errors.New("connection refused")
		}), phase: v1alpha2.RecoveryRefused, message: "no member's etcd answers"},
		{name: "a wrong token is not consent", w: lostQuorumWorld("0123456789ab"), phase: v1alpha2.RecoveryPlanned, survivor: "m0", message: "is not the current plan's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(tc.w)
			if !p.recoverySet || p.recovery == nil {
				t.Fatalf("no recovery status; plan %+v", p)
			}
			r := p.recovery
			if r.Phase != tc.phase {
				t.Fatalf("phase %s, want %s: %s", r.Phase, tc.phase, r.Message)
			}
			if tc.survivor != "" && (r.Survivor == nil || r.Survivor.Name != tc.survivor) {
				t.Errorf("survivor %+v, want %s", r.Survivor, tc.survivor)
			}
			if !strings.Contains(r.Message, tc.message) {
				t.Errorf("message %q does not say %q", r.Message, tc.message)
			}
			if p.change != nil {
				t.Errorf("a %s made change %d", r.Phase, p.change.kind)
			}
		})
	}
}

// The plan's token, given back, starts the recovery: the survivor is
// marked and restarted; the token of a plan is stable from pass to pass.
func TestRecoveryConsented(t *testing.T) {
	dry := decide(lostQuorumWorld(manifest.RecoverDryRun))
	again := decide(lostQuorumWorld(manifest.RecoverDryRun))
	if dry.recovery.Token != again.recovery.Token {
		t.Fatalf("the token changes from pass to pass: %s, %s", dry.recovery.Token, again.recovery.Token)
	}
	d := dry.recovery.Discarded
	if len(d) != 2 || d[0].Name != "m1" || d[0].AppliedIndex == nil || *d[0].AppliedIndex != 990 || d[0].LastSeen == nil {
		t.Errorf("discarded: %+v", d)
	}
	// Consent writes the phase first and touches nothing.
	p := decide(lostQuorumWorld(dry.recovery.Token, planned(dry.recovery)))
	if p.change != nil || p.recovery.Phase != v1alpha2.RecoveryFencing || p.recovery.StartTime == nil {
		t.Fatalf("consent made %+v, recovery %+v", p.change, p.recovery)
	}
	checkFencing(t, dry.recovery.Token, p.recovery)
	// A plan consented to while the cluster got its quorum back is not
	// carried out.
	w := healthyWorld(3, func(w *world) {
		w.cluster.Annotations = map[string]string{manifest.AnnotationRecover: dry.recovery.Token}
		w.cluster.Status.Recovery = dry.recovery.DeepCopy()
	})
	if p := decide(w); p.change != nil && p.change.kind == forceNewCluster {
		t.Error("a healthy cluster was forced")
	}
}

// checkFencing follows a consented recovery through its fencing: the
// discarded members stop one per pass, then the survivor is forced; taken
// back, or a leader again, the fenced members wake and the recovery stops.
func checkFencing(t *testing.T, token string, fencingRec *v1alpha2.RecoveryStatus) {
	t.Helper()
	fencing := func(mods ...func(*world)) *world {
		return lostQuorumWorld(token, planned(fencingRec), func(w *world) {
			for _, mod := range mods {
				mod(w)
			}
		})
	}
	// The discarded members stop first, one per pass.
	if q := decide(fencing()); q.change == nil || q.change.kind != fence || q.change.member.Name != "m1" {
		t.Fatalf("fencing: %+v", q.change)
	}
	fenced := func(w *world) {
		for _, n := range []string{"m1", "m2"} {
			member(w, n).Spec.Dormant = true
			delete(w.pods, n)
		}
	}
	q := decide(fencing(fenced))
	if q.change == nil || q.change.kind != forceNewCluster || q.change.member.Name != "m0" || q.recovery.Phase != v1alpha2.RecoveryForcingNewCluster {
		t.Fatalf("once fenced: %+v %+v", q.change, q.recovery)
	}
	// Taken back, or a leader again, before the survivor is forced: the
	// fenced members wake and the recovery stops.
	withdrawn := func(w *world) { w.cluster.Annotations[manifest.AnnotationRecover] = "" }
	if q := decide(fencing(fenced, withdrawn)); q.change == nil || q.change.kind != unfence {
		t.Fatalf("withdrawn: %+v", q.change)
	}
	woken := func(w *world) {
		for _, n := range []string{"m1", "m2"} {
			member(w, n).Spec.Dormant = false
		}
	}
	if q := decide(fencing(woken, withdrawn)); q.change != nil || q.recovery.Phase != v1alpha2.RecoveryStopped {
		t.Fatalf("withdrawn, woken: %+v %+v", q.change, q.recovery)
	}
	leads := func(w *world) { w.etcd.status["m0"].Leader = 0x10 }
	if q := decide(fencing(fenced, leads)); q.change == nil || q.change.kind != unfence {
		t.Fatalf("a leader again: %+v", q.change)
	}
}

// planned records the plan the dry run wrote, as the status holds it.
func planned(rec *v1alpha2.RecoveryStatus) func(*world) {
	return func(w *world) { w.cluster.Status.Recovery = rec.DeepCopy() }
}

// Once the survivor leads alone its mark comes off before anything else;
// the discarded members go next, one per pass; then the cluster grows.
func TestRecoveryAfterTheForcedStart(t *testing.T) {
	forced := func(mods ...func(*world)) *world {
		return healthyWorld(1, func(w *world) {
			m0 := member(w, "m0")
			m0.Annotations = map[string]string{manifest.AnnotationForceNewCluster: "tok"}
			w.pods["m0"].Annotations[manifest.AnnotationForceNewCluster] = "true"
			w.cluster.Spec.Replicas = ptr.To(int32(3))
			w.cluster.Status.Observed = manifest.Observe(&w.cluster.Spec)
			for _, n := range []string{"m1", "m2"} {
				m := addMember(w, n, t0)
				m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: "Lost", Status: metav1.ConditionTrue, Message: "gone"})
				delete(w.pods, n)
				delete(w.etcd.status, n)
			}
			w.etcd.list.Members = w.etcd.list.Members[:1]
			w.cluster.Status.Recovery = &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryForcingNewCluster, Token: "tok",
				Survivor: &v1alpha2.RecoveryMember{Name: "m0"}, Discarded: []v1alpha2.RecoveryMember{{Name: "m1"}, {Name: "m2"}}}
			for _, mod := range mods {
				mod(w)
			}
		})
	}
	if p := decide(forced()); p.change == nil || p.change.kind != clearForce || p.recovery.Phase != v1alpha2.RecoveryRemovingLost {
		t.Fatalf("serving alone: %+v %+v", p.change, p.recovery)
	}
	// Still forcing: etcd lists the others yet (the forced start has not
	// happened): wait, change nothing.
	notYet := forced(func(w *world) { w.etcd.status["m0"].Leader = 0 })
	if p := decide(notYet); p.change != nil {
		t.Fatalf("before the survivor leads alone: %+v", p.change)
	}
	// Only the Pod still carries the mark (the operator stopped between
	// the two patches): it comes off.
	podOnly := forced(func(w *world) { delete(member(w, "m0").Annotations, manifest.AnnotationForceNewCluster) })
	if p := decide(podOnly); p.change == nil || p.change.kind != clearForce {
		t.Fatalf("mark left on the Pod: %+v", p.change)
	}
	removing := forced(func(w *world) {
		delete(member(w, "m0").Annotations, manifest.AnnotationForceNewCluster)
		delete(w.pods["m0"].Annotations, manifest.AnnotationForceNewCluster)
		w.cluster.Status.Recovery.Phase = v1alpha2.RecoveryRemovingLost
	})
	p := decide(removing)
	if p.change == nil || p.change.kind != discard || p.change.member.Name != "m1" {
		t.Fatalf("removing: %+v", p.change)
	}
}

// snapshotWorld is lostQuorumWorld asking to rebuild from EtcdSnapshot
// "snap", which is complete unless mods say otherwise.
func snapshotWorld(request string, mods ...func(*world)) *world {
	return lostQuorumWorld(request, func(w *world) {
		w.cluster.Annotations[manifest.AnnotationRecoverFromSnapshot] = "snap"
		w.recoverySnapshot = &v1alpha2.EtcdSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "ns", UID: "snapuid"},
			Spec:       v1alpha2.EtcdSnapshotSpec{Destination: v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "http://minio:9000", Bucket: "b", Key: "c/"}}},
			Status: v1alpha2.EtcdSnapshotStatus{Phase: v1alpha2.SnapshotComplete,
				Artifact: &v1alpha2.SnapshotArtifact{URI: "s3://b/c/snap.db", Revision: 42}},
		}
		for _, mod := range mods {
			mod(w)
		}
	})
}

// A snapshot that is missing or not complete cannot be restored.
func TestRecoveryFromAnUnfinishedSnapshotIsRefused(t *testing.T) {
	if p := decide(snapshotWorld(manifest.RecoverDryRun, func(w *world) { w.recoverySnapshot = nil })); p.recovery.Phase != v1alpha2.RecoveryRefused ||
		!strings.Contains(p.recovery.Message, "does not exist") {
		t.Errorf("a missing snapshot: %+v", p.recovery)
	}
	if p := decide(snapshotWorld(manifest.RecoverDryRun, func(w *world) { w.recoverySnapshot.Status.Phase = v1alpha2.SnapshotFailed })); p.recovery.Phase != v1alpha2.RecoveryRefused {
		t.Errorf("a failed snapshot: %+v", p.recovery)
	}
}

func TestRecoveryFromASnapshot(t *testing.T) {
	dry := decide(snapshotWorld(manifest.RecoverDryRun))
	r := dry.recovery
	if r.Phase != v1alpha2.RecoveryPlanned || r.Survivor != nil || r.Snapshot != "snap" || len(r.Discarded) != 3 || r.Restore == nil ||
		r.Restore.Source.S3 == nil || r.Restore.Source.S3.Key != "c/snap.db" || dry.change != nil {
		t.Fatalf("the plan: %+v (change %+v)", r, dry.change)
	}
	if r.Token == decide(lostQuorumWorld(manifest.RecoverDryRun)).recovery.Token {
		t.Error("the snapshot plan has the survivor plan's token")
	}
	// Consent writes the phase first and touches nothing; the next pass
	// deletes the first member.
	p := decide(snapshotWorld(r.Token, planned(r)))
	if p.change != nil || p.recovery.Phase != v1alpha2.RecoveryRemovingLost {
		t.Fatalf("consent: %+v %+v", p.change, p.recovery)
	}
	if q := decide(snapshotWorld(r.Token, planned(p.recovery))); q.change == nil || q.change.kind != discard || !q.change.keepClaim {
		t.Fatalf("after consent: %+v %+v", q.change, q.recovery)
	}
	// The cache lists members in no set order: the consent given to a plan
	// still holds on a pass that sees them in another (found by the
	// integration suite: the token changed under the operator's reader).
	reversed := func(w *world) { slices.Reverse(w.members) }
	if got := decide(snapshotWorld(manifest.RecoverDryRun, reversed)).recovery.Token; got != r.Token {
		t.Errorf("the same plan over members listed the other way round has token %s, want %s", got, r.Token)
	}
	if p := decide(snapshotWorld(r.Token, planned(r), reversed)); p.recovery.Phase != v1alpha2.RecoveryRemovingLost {
		t.Fatalf("consent over members listed the other way round: %+v %+v", p.change, p.recovery)
	}
	removing := func(mods ...func(*world)) *world {
		return snapshotWorld(r.Token, func(w *world) {
			w.cluster.Status.Recovery = withPhase(r, v1alpha2.RecoveryRemovingLost, "")
			for _, mod := range mods {
				mod(w)
			}
		})
	}
	now := metav1.NewTime(t0)
	p = decide(removing(func(w *world) {
		for _, m := range w.members {
			m.DeletionTimestamp, m.Finalizers = &now, []string{manifest.MemberFinalizer}
		}
	}))
	if p.change == nil || p.change.kind != release {
		t.Fatalf("deleted members without a quorum to leave: %+v", p.change)
	}
	p = decide(removing(func(w *world) { w.members = nil }))
	if p.change == nil || p.change.kind != latchStatus || p.change.status.ClusterID != "" || !p.recoverySet || p.recovery.Phase != v1alpha2.RecoveryRebootstrapping ||
		p.change.status.ClusterToken == manifest.ClusterToken(snapshotWorld("").cluster) {
		t.Fatalf("every member gone: %+v", p.change)
	}
}

// An alarm is raised and disarmed in etcd under no watch: a cluster at
// rest looks again on a slow timer (a NOSPACE alarm raised at rest shows in
// no Pod's readiness; found by TestDefragClearsNOSPACE, which waited for
// the alarm in vain when no pass happened to follow the fill), and one that
// reports an alarm on a faster one, or its Degraded condition would report
// the alarm long after it is gone. A paused cluster has no etcd to ask.
func TestAlarmIsPolled(t *testing.T) {
	w := healthyWorld(3)
	if d := requeue(w, plan{}, outcome{}); d == 0 || d > healthPoll {
		t.Fatalf("a steady cluster looks again in %s, want at most %s", d, healthPoll)
	}
	if d := requeue(&world{cluster: w.cluster}, plan{}, outcome{}); d != 0 {
		t.Fatalf("a cluster with no running member looks again in %s", d)
	}
	w.etcd.leader.Errors = []string{"memberID:16 alarm:NOSPACE "}
	if d := requeue(w, plan{}, outcome{}); d == 0 || d > alarmPoll {
		t.Errorf("with NOSPACE raised the next look is in %s, want at most %s", d, alarmPoll)
	}
}

// Claim 5 of issue 41: a rebuild from a snapshot deletes every member, so
// whatever can tell in advance that the restore would fail refuses the
// plan, before anything is deleted.
func TestSnapshotRecoveryRefusesWhatCannotRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*world)
		want string
	}{
		{"its verification failed", func(w *world) {
			w.recoverySnapshot.Status.Conditions = []metav1.Condition{{Type: conditions.Verified, Status: metav1.ConditionFalse, Reason: "KVHashMismatch", Message: "hashes differ"}}
		}, "verification failed"},
		{"taken from a newer etcd minor", func(w *world) { w.recoverySnapshot.Status.Artifact.EtcdVersion = "3.7.3" }, "newer minor"},
		{"larger than a member's volume", func(w *world) { w.recoverySnapshot.Status.Artifact.SizeBytes = 2 << 30 }, "do not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(snapshotWorld(manifest.RecoverDryRun, tc.mod))
			if p.change != nil || p.recovery.Phase != v1alpha2.RecoveryRefused || !strings.Contains(p.recovery.Message, tc.want) {
				t.Errorf("%+v, change %+v", p.recovery, p.change)
			}
		})
	}
	ok := decide(snapshotWorld(manifest.RecoverDryRun, func(w *world) { w.recoverySnapshot.Status.Artifact.EtcdVersion = "3.5.35" }))
	if ok.recovery.Phase != v1alpha2.RecoveryPlanned || !strings.Contains(ok.recovery.Message, "never verified") {
		t.Errorf("an older minor, unverified: %+v", ok.recovery)
	}
}
