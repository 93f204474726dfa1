package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// scheduleNS is served by an operator of its own, which the suite stops
// and starts: the other suites' operator keeps running.
const scheduleNS = "e2e-schedule"

// TestSnapshotSchedule runs a schedule every minute with a retention of two
// stored snapshots: over several runs MinIO holds exactly two of them (and
// the one-off snapshot and the file beside them that the schedule did not
// write), and the objects' history stays within its limits. Then the
// operator is stopped across two slots: when it is back, the missed run is
// made once, not once per slot.
func TestSnapshotSchedule(t *testing.T) {
	t.Parallel()
	ns := namespace(t, scheduleNS)
	if err := installOperator("eo-schedule", ns, false, nil, ns); err != nil {
		t.Fatal(err)
	}
	s3 := startS3(t, ns)
	s3.makeBucket(t, "backups")
	newCluster(t, ns, "ticking", 1)
	waitReconciled(t, ns, "ticking", 1, 3*time.Minute)
	writeKeys(t, ns, "ticking", 100)
	// Not the schedule's: a one-off snapshot into the same prefix, and a
	// file someone put there.
	newSnapshot(t, ns, "one-off", "ticking", s3.location("backups", "ticking"))
	waitSnapshot(t, ns, "one-off", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	s3.put(t, "backups", "ticking/by-hand.db", "not a snapshot of the schedule")
	foreign := []string{"ticking/by-hand.db", "ticking/one-off.db"}

	sched := &v1alpha2.EtcdSnapshotSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "every-minute", Namespace: ns},
		Spec: v1alpha2.EtcdSnapshotScheduleSpec{
			Schedule: "* * * * *",
			SnapshotTemplate: v1alpha2.EtcdSnapshotTemplate{Spec: v1alpha2.EtcdSnapshotSpec{
				ClusterRef:  corev1.LocalObjectReference{Name: "ticking"},
				Destination: s3.location("backups", "ticking"),
			}},
			SuccessfulSnapshotsHistoryLimit: ptr.To[int32](3),
			Retention:                       &v1alpha2.SnapshotRetention{KeepLast: ptr.To[int32](2)},
		},
	}
	if err := k.Create(context.Background(), sched); err != nil {
		t.Fatal(err)
	}
	// Four runs; after each, exactly min(runs, 2) of the schedule's
	// snapshots are stored.
	seen := map[string]bool{}
	eventually(t, 8*time.Minute, "four scheduled snapshots, each leaving two stored", func() (bool, string) {
		st, quiet := settled(t, ns, sched.Name)
		if !quiet {
			return false, "a run is in progress"
		}
		if st.LastSnapshot == "" || seen[st.LastSnapshot] {
			return len(seen) >= 4, fmt.Sprintf("%d runs", len(seen))
		}
		mine := scheduleObjects(t, s3, foreign)
		if st2, still := settled(t, ns, sched.Name); !still || st2.LastSnapshot != st.LastSnapshot {
			return false, "a run started while listing"
		}
		seen[st.LastSnapshot] = true
		if want := min(len(seen), 2); len(mine) != want {
			t.Errorf("after %d runs MinIO holds %d of the schedule's snapshots (%v), want %d", len(seen), len(mine), mine, want)
		}
		if !slices.Contains(mine, "ticking/"+st.LastSnapshot+".db") {
			t.Errorf("the newest snapshot %s is not stored: %v", st.LastSnapshot, mine)
		}
		return len(seen) >= 4, fmt.Sprintf("%d runs", len(seen))
	})
	checkHistory(t, ns, sched.Name, 2)
	got := s3.objects(t, "backups", "ticking/")
	for _, f := range foreign {
		if !slices.Contains(got, f) {
			t.Errorf("%s, which the schedule did not write, is gone: %v", f, got)
		}
	}
	if c := conditions.Get(getSchedule(t, ns, sched.Name).Status.Conditions, conditions.RetentionApplied); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("RetentionApplied = %s", condString(c))
	}

	restartAcrossSlots(t, ns, sched.Name)
}

// restartAcrossSlots stops the suite's operator for two slots, starts it
// again and checks that exactly one snapshot is made for the missed slots:
// the latest.
func restartAcrossSlots(t *testing.T, ns, name string) {
	t.Helper()
	if out, err := kubectl("-n", ns, "scale", "deploy/eo-schedule-etcd-operator", "--replicas=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	eventually(t, 2*time.Minute, "the operator stopped", func() (bool, string) {
		out, _ := kubectl("-n", ns, "get", "pods", "-l", "control-plane=controller-manager", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
	stopped := time.Now()
	before := scheduleSnapshots(t, ns, name)
	// Two slots pass with nobody to run them.
	missedUntil := stopped.Truncate(time.Minute).Add(2*time.Minute + 5*time.Second)
	eventually(t, 4*time.Minute, "two slots missed", func() (bool, string) {
		return time.Now().After(missedUntil), "waiting for the clock"
	})
	if out, err := kubectl("-n", ns, "scale", "deploy/eo-schedule-etcd-operator", "--replicas=1"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	restarted := time.Now()
	var made []v1alpha2.EtcdSnapshot
	eventually(t, 3*time.Minute, "a snapshot for the missed slots", func() (bool, string) {
		made = newSince(scheduleSnapshots(t, ns, name), before)
		return len(made) > 0, "none yet"
	})
	// What the operator made on its first pass after the restart: every
	// snapshot whose slot is not after the minute it made the first one in.
	// Once per missed slot would be two or more.
	firstPass := made[0].CreationTimestamp.Truncate(time.Minute)
	var missed []string
	var slot time.Time
	for _, s := range made {
		at, _ := time.Parse(time.RFC3339, s.Annotations[manifest.AnnotationScheduledAt])
		if !at.After(firstPass) {
			missed, slot = append(missed, s.Name+"@"+at.Format(time.TimeOnly)), at
		}
	}
	if len(missed) != 1 {
		t.Fatalf("after missing the slots between %s and %s, the schedule made %v; want one snapshot",
			stopped.Format(time.TimeOnly), restarted.Format(time.TimeOnly), missed)
	}
	if slot.Before(stopped.Truncate(time.Minute).Add(2 * time.Minute)) {
		t.Errorf("the missed run was made for %s, not for the latest missed slot", slot.Format(time.TimeOnly))
	}
	eventually(t, 3*time.Minute, "the missed run finished", func() (bool, string) {
		s := &v1alpha2.EtcdSnapshot{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: made[0].Name}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.Phase == v1alpha2.SnapshotComplete, string(s.Status.Phase)
	})
}

// settled reads the schedule's status and whether no run is in progress.
func settled(t *testing.T, ns, name string) (v1alpha2.EtcdSnapshotScheduleStatus, bool) {
	t.Helper()
	s := getSchedule(t, ns, name)
	if len(s.Status.Active) > 0 || s.Status.LastSnapshot == "" {
		return s.Status, false
	}
	last := &v1alpha2.EtcdSnapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: s.Status.LastSnapshot}, last); err != nil {
		return s.Status, false
	}
	if last.Status.Phase != v1alpha2.SnapshotComplete {
		if last.Status.Phase == v1alpha2.SnapshotFailed {
			t.Fatalf("scheduled snapshot %s failed: %s", last.Name, condString(conditions.Get(last.Status.Conditions, conditions.Ready)))
		}
		return s.Status, false
	}
	return s.Status, true
}

// scheduleObjects are the stored snapshots in the prefix but the foreign ones.
func scheduleObjects(t *testing.T, s3 *s3Server, foreign []string) []string {
	var out []string
	for _, key := range snapshotsIn(s3.objects(t, "backups", "ticking/")) {
		if !slices.Contains(foreign, key) {
			out = append(out, key)
		}
	}
	return out
}

// checkHistory checks that the schedule keeps no more Complete snapshot
// objects than its retention and history allow.
func checkHistory(t *testing.T, ns, name string, most int) {
	t.Helper()
	eventually(t, time.Minute, "history trimmed", func() (bool, string) {
		n := 0
		for _, s := range scheduleSnapshots(t, ns, name) {
			if s.Status.Phase == v1alpha2.SnapshotComplete {
				n++
			}
		}
		return n <= most, fmt.Sprintf("%d complete snapshot objects", n)
	})
}

func getSchedule(t *testing.T, ns, name string) *v1alpha2.EtcdSnapshotSchedule {
	t.Helper()
	s := &v1alpha2.EtcdSnapshotSchedule{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func scheduleSnapshots(t *testing.T, ns, name string) []v1alpha2.EtcdSnapshot {
	t.Helper()
	list := &v1alpha2.EtcdSnapshotList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelSchedule: name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func newSince(now, before []v1alpha2.EtcdSnapshot) []v1alpha2.EtcdSnapshot {
	var out []v1alpha2.EtcdSnapshot
	for _, s := range now {
		if !slices.ContainsFunc(before, func(b v1alpha2.EtcdSnapshot) bool { return b.Name == s.Name }) {
			out = append(out, s)
		}
	}
	return out
}
