//go:build bench

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestBenchDayTwo runs the day-two rows alone: `go test -tags bench -run
// TestBenchDayTwo ./test/e2e/` (a sandbox of its own, as make bench).
func TestBenchDayTwo(t *testing.T) {
	report(t, dayTwoBench(t, namespace(t, benchNS)))
}

// dayTwoBench measures, on real nodes, a whole-cluster defragmentation under
// a writer (its longest write stall, and how long the run takes) and a
// recovery from quorum loss (two of three members wiped) from the survivor:
// from the consent to writes served again, and to three members again.
func dayTwoBench(t *testing.T, ns string) []result {
	var rows []result
	newCluster(t, ns, "dfrag", 3)
	waitReconciled(t, ns, "dfrag", 3, 5*time.Minute)
	fillAndFree(t, ns, "dfrag", 160, 100<<10)
	w := startWriter(t, ns, "dfrag")
	w.requireWritesAfter("", 5, time.Minute)
	w.mark("start")
	start := time.Now()
	done := waitDefrag(t, ns, createDefrag(t, ns, "dfrag", "bench", &v1alpha2.DefragRule{All: true}), 10*time.Minute)
	took := time.Since(start).Seconds()
	w.mark("end")
	if done.Status.Phase != v1alpha2.DefragComplete {
		t.Fatalf("defrag %s", done.Status.Phase)
	}
	w.verify("end")
	stall := w.longestStall("start", "end")
	rows = append(rows,
		row("defrag of 3 members (16 MiB freed each), the leader last: longest write stall", stall.Seconds(), "s",
			"≤ election timeout (1 s)", electionTimeout.Seconds()).withStall(stall),
		row("defrag of 3 members (16 MiB freed each): run created → Complete", took, "s", "reported", 0))

	newCluster(t, ns, "phoenix", 3)
	waitReconciled(t, ns, "phoenix", 3, 5*time.Minute)
	ms := members(t, ns, "phoenix")
	for _, m := range ms[1:] {
		if err := sb.Wipe(context.Background(), ns, manifest.PVCName(m.Name)); err != nil {
			t.Fatal(err)
		}
		if err := sb.Kill(context.Background(), ns, m.Name, manifest.EtcdContainer); err != nil {
			t.Fatal(err)
		}
	}
	rw := startWriterIn(t, ns, "phoenix", "phoenix-bench")
	annotateRecover(t, ns, "phoenix", manifest.RecoverDryRun)
	var plan *v1alpha2.RecoveryStatus
	eventually(t, 3*time.Minute, "the plan", func() (bool, string) {
		plan = getCluster(t, ns, "phoenix").Status.Recovery
		return plan != nil && plan.Phase == v1alpha2.RecoveryPlanned, ""
	})
	rw.mark("consent")
	consent := time.Now()
	annotateRecover(t, ns, "phoenix", plan.Token)
	rw.requireWritesAfter("consent", 1, 5*time.Minute)
	served := rw.firstAckAfter("consent").Sub(consent).Seconds()
	eventually(t, 5*time.Minute, "recovered", func() (bool, string) {
		r := getCluster(t, ns, "phoenix").Status.Recovery
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted, ""
	})
	waitReconciled(t, ns, "phoenix", 3, 5*time.Minute)
	whole := time.Since(consent).Seconds()
	rw.mark("end")
	rw.verify("end")
	rows = append(rows,
		row("quorum loss (2 of 3 wiped), consent → writes served by the survivor", served, "s", "≤ 30 s", 30),
		row("quorum loss (2 of 3 wiped), consent → 3 members reconciled", whole, "s", "≤ 90 s", 90))
	return rows
}
