//go:build bench

package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// result is one row of the benchmark table. Met is computed from Value and
// Limit, never written by hand; a row without a limit reports only.
type result struct {
	Scenario string  `json:"scenario"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Target   string  `json:"target"`
	Limit    float64 `json:"limit,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	// StallSeconds is the longest time a client writing throughout the
	// scenario went without an acknowledged write.
	StallSeconds *float64 `json:"longestWriteStallSeconds,omitempty"`
	// Floor is what the nodes allow for the scenario, measured in the same
	// run (floors), and Ratio the value over it.
	Floor *float64 `json:"floor,omitempty"`
	Ratio *float64 `json:"ratio,omitempty"`
}

func row(scenario string, value float64, unit, target string, limit float64) result {
	r := result{Scenario: scenario, Value: value, Unit: unit, Target: target, Limit: limit}
	if limit > 0 {
		r.Met = ptr.To(value <= limit)
	}
	return r
}

// floorRow is a timed scenario held to factor × its floor, and below
// ceiling too when ceiling is set (a bar another operator sets).
func floorRow(scenario string, value, floor, factor, ceiling float64) result {
	limit, target := factor*floor, fmt.Sprintf("≤ %.2f × floor", factor)
	if ceiling > 0 {
		target += fmt.Sprintf(", < %.2f s", ceiling)
		limit = min(limit, ceiling)
	}
	r := row(scenario, value, "s", target, limit)
	if floor > 0 {
		r.Floor, r.Ratio = ptr.To(floor), ptr.To(value/floor)
	}
	return r
}

func (r result) withStall(d time.Duration) result {
	r.StallSeconds = ptr.To(d.Seconds())
	return r
}

const benchNS = "e2e-bench"

// referenceScaleDown is the reference operator's scale 5 → 3 on the same
// nodes (issue 24's measurement; the bench cannot run it): the bar.
const referenceScaleDown = 3.25

// electionTimeout is etcd's default; a stall where quorum holds should not
// last longer.
const electionTimeout = time.Second

// TestBench runs the scenarios of DESIGN.md section 6 and prints a table; it
// writes bench/results.json. It measures, it asserts nothing: `make bench`.
// Every timing ends at the same state: Available with every member a voter
// and etcd's membership matching the members.
// The bench's operator watches every namespace, as installed by default.
func init() { mainOperatorWatchesAll = true }

func TestBench(t *testing.T) {
	ns := namespace(t, benchNS)
	t.Cleanup(func() { saveOperatorLog(t) })
	var rows []result
	add := func(rs ...result) {
		for _, r := range rs {
			rows = append(rows, r)
			t.Logf("%-62s %8.2f %-5s target %s", r.Scenario, r.Value, r.Unit, r.Target)
		}
	}
	// The floors are measured when a group compared with them runs.
	var f floors
	if benchWants("create") || benchWants("spread") || benchWants("scale") || benchWants("replace") {
		f = measureFloors(t, ns)
		add(f.rows()...)
	}
	if benchWants("create") {
		add(singleMember(t, ns, f.pod)...)
		for _, n := range []int32{3, 5} {
			s, stall, _ := timeToAvailable(t, ns, fmt.Sprintf("avail%d", n), n)
			add(floorRow(fmt.Sprintf("EtcdCluster of %d created → reconciled", n), s, f.grow[int(n)], 1.25, 0).withStall(stall))
		}
	}
	if benchWants("spread") {
		add(bootstrapSpread(t, ns, 10, f.grow[3])...)
	}
	if benchWants("scale") {
		if !benchWants("create") {
			newCluster(t, ns, "avail3", 3)
			waitReconciled(t, ns, "avail3", 3, 5*time.Minute)
		}
		up, upStall := timeToScale(t, ns, "avail3", 5)
		add(floorRow("scale 3 → 5 → reconciled", up, f.grow[5]-f.grow[3], 1.25, 0).withStall(upStall))
		down, downStall := timeToScale(t, ns, "avail3", 3)
		add(floorRow("scale 5 → 3 → reconciled, Pods gone", down, f.shrink, 1, referenceScaleDown).withStall(downStall))
	}
	if benchWants("replace") {
		tmpfs, tmpfsStall := timeToReplace(t, ns, "tmpfs", true)
		add(floorRow("tmpfs member Pod deleted → replaced, reconciled", tmpfs, f.repair, 1.25, 0).withStall(tmpfsStall))
		pvc, pvcStall := timeToReplace(t, ns, "pvc", false)
		// DESIGN.md's "≤ 2 s" is less than one Pod start; the replacement is
		// the repair's learner join, held to the same floor (issue 24).
		add(floorRow("PVC member data lost → replaced, reconciled (from the loss seen)", pvc, f.repair, 1.25, 0).withStall(pvcStall))
	}
	if benchWants("leader") {
		add(leaderRemoval(t, ns)...)
	}
	if benchWants("upgrade") {
		for _, n := range []int32{3, 5} {
			add(rollingUpgrade(t, ns, n)...)
		}
	}
	if benchWants("probe") {
		add(probeCost(t, ns)...)
	}
	if benchWants("daytwo") {
		add(dayTwoBench(t, ns)...)
	}
	deleteClusters(t, ns)
	if benchWants("steady") {
		add(steadyState(t, ns, steadyClusters(t))...)
	}
	if benchWants("snapshot") {
		add(snapshotBench(t)...)
	}
	report(t, rows)
}

// steadyClusters is how many three-member clusters the steady state runs:
// 30, or BENCH_STEADY_CLUSTERS. On the 2-core machine 30 clusters (90 etcd
// Pods) saturate it (load above 150 while they bootstrap, half of them
// reconciled after 13 minutes), so a smaller fleet is measured there and its
// reads projected to 30 clusters.
func steadyClusters(t *testing.T) int {
	v := os.Getenv("BENCH_STEADY_CLUSTERS")
	if v == "" {
		return 30
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("BENCH_STEADY_CLUSTERS=%q: want a positive number", v)
	}
	return n
}

// benchWants says whether BENCH_ONLY (a comma-separated list of scenario
// groups; empty for all) asks for the group.
func benchWants(group string) bool {
	only := os.Getenv("BENCH_ONLY")
	return only == "" || slices.Contains(strings.Split(only, ","), group)
}

// deleteClusters deletes the scenarios' clusters before the steady state
// is measured.
func deleteClusters(t *testing.T, ns string) {
	list := &v1alpha2.EtcdClusterList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if err := deleteCluster(context.Background(), &list.Items[i]); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
}

// timeToAvailable creates a cluster with a writer trying from the start; the
// stall reported is the longest after the first acknowledged write (while
// the cluster grows from its seed). The timeline it returns has stopped.
func timeToAvailable(t *testing.T, ns, name string, n int32) (float64, time.Duration, *timeline) {
	tl := watchTimeline(t, ns, name)
	start := tl.start
	newCluster(t, ns, name, n)
	w := startWriter(t, ns, name)
	defer w.halt()
	took := waitReconciledEvery(t, pollFloor, ns, name, int(n), 5*time.Minute).Sub(start).Seconds()
	tl.stop(t, fmt.Sprintf("%s, %d members created (reconciled at %.2f)", name, n, took))
	w.mark("end")
	w.verify("end")
	return took, w.stallSinceFirstWrite("end"), tl
}

// singleRuns is how many clusters of one member the bench creates, and how
// many bare Pods its floor starts: one start of an etcd Pod takes about 1 or
// about 2 s on these nodes (the kubelet probes readiness once a second from
// the Pod's admission, and a single etcd elects itself 0.1 to 1 s after it
// starts, at random), so a few samples decide nothing; their means do.
const singleRuns = 9

// singleMember creates clusters of one member, one after the other, and
// reports their mean time to reconciled against the floor of the same thing
// done by hand (a bare etcd Pod to Ready, also a mean), and how much of it
// was the operator's own: the time not spent between its member's Pod being
// created and turning Ready, which is the kubelet's and etcd's.
func singleMember(t *testing.T, ns string, floor float64) []result {
	var took, own, podStart []float64
	var stall time.Duration
	for i := range singleRuns {
		name := fmt.Sprintf("avail1-%d", i)
		s, st, tl := timeToAvailable(t, ns, name, 1)
		ms := members(t, ns, name)
		if len(ms) != 1 {
			t.Fatalf("%s: %d members, want 1", name, len(ms))
		}
		p, ok := tl.between(ms[0].Name, "pod", "ready")
		if !ok {
			t.Fatalf("%s: the timeline has no Pod created and Ready for its member", name)
		}
		took, podStart, own = append(took, s), append(podStart, p.Seconds()), append(own, s-p.Seconds())
		stall = max(stall, st)
		fmt.Printf("%s: %.2f s, its Pod created → Ready %.2f s, the operator's own %.2f s\n", name, s, p.Seconds(), s-p.Seconds())
		if err := deleteCluster(context.Background(), getCluster(t, ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	what := fmt.Sprintf("(mean of %d)", singleRuns)
	podRow := row("  of which its Pod created → Ready, the kubelet's and etcd's "+what, mean(podStart), "s", "(measured)", 0)
	podRow.Floor, podRow.Ratio = ptr.To(floor), ptr.To(mean(podStart)/floor)
	return []result{
		floorRow("EtcdCluster of 1 created → reconciled "+what, mean(took), floor, 1.25, 0).withStall(stall),
		podRow,
		row("  of which the operator's own (before its Pod, after Ready) "+what, mean(own), "s", "≤ 0.25 × floor", 0.25*floor),
	}
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// bootstrapSpread creates n three-member clusters one after the other and
// reports the fastest, median and slowest, to catch stalls that one run hides.
func bootstrapSpread(t *testing.T, ns string, n int, floor float64) []result {
	var took []float64
	for i := range n {
		name := fmt.Sprintf("spread%d", i)
		s, _, _ := timeToAvailable(t, ns, name, 3)
		took = append(took, s)
		if err := deleteCluster(context.Background(), getCluster(t, ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	return []result{
		floorRow(fmt.Sprintf("%d × 3 members created, fastest", n), took[0], floor, 1.25, 0),
		floorRow(fmt.Sprintf("%d × 3 members created, median", n), took[n/2], floor, 1.25, 0),
		floorRow(fmt.Sprintf("%d × 3 members created, slowest", n), took[n-1], floor, 1.25, 0),
	}
}

func timeToScale(t *testing.T, ns, name string, n int32) (float64, time.Duration) {
	// Keys of their own: the cluster's earlier writers' keys are not in
	// this writer's history.
	w := startWriterIn(t, ns, name, fmt.Sprintf("%s-to%d", name, n))
	defer w.halt()
	w.requireWritesAfter("", 5, time.Minute)
	w.mark("start")
	tl := watchTimeline(t, ns, name)
	start := tl.start
	setReplicas(t, ns, name, n)
	waitReconciledEvery(t, pollFloor, ns, name, int(n), 5*time.Minute)
	// Shrinking ends when the Pods that went are gone, as the floor's does.
	end := eventuallyEvery(t, pollFloor, 5*time.Minute, fmt.Sprintf("%d Pods of %s left", n, name), func() (bool, string) {
		left := len(pods(t, ns, name))
		return left == int(n), fmt.Sprintf("%d left", left)
	})
	took := end.Sub(start).Seconds()
	tl.stop(t, fmt.Sprintf("%s scaled to %d (done at %.2f)", name, n, took))
	w.mark("end")
	w.verify("end")
	return took, w.longestStall("start", "end")
}

// timeToReplace loses one member (its Pod for tmpfs, its data for a PVC) and
// times until the cluster is reconciled again without it. For a PVC member
// the clock starts when the loss is visible (the member is marked Lost: etcd
// exited on its emptied data directory), as DESIGN.md states the target.
func timeToReplace(t *testing.T, ns, name string, tmpfs bool) (float64, time.Duration) {
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		if tmpfs {
			c.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse("256Mi")}
			c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](100 << 20)}
		}
	})
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)
	defer w.halt()
	w.requireWritesAfter("", 5, time.Minute)
	victim := members(t, ns, name)[1].Name
	w.mark("start")
	tl := watchTimeline(t, ns, name)
	start := tl.start
	if tmpfs {
		deletePod(t, ns, victim)
	} else {
		if err := sb.Wipe(context.Background(), ns, manifest.PVCName(victim)); err != nil {
			t.Fatal(err)
		}
		if err := sb.Kill(context.Background(), ns, victim, manifest.EtcdContainer); err != nil {
			t.Fatal(err)
		}
		start = lostSince(t, ns, victim)
	}
	waitReplaced(t, ns, name, victim, 3, 5*time.Minute)
	took := waitReconciledEvery(t, pollFloor, ns, name, 3, 5*time.Minute).Sub(start).Seconds()
	tl.stop(t, fmt.Sprintf("%s, %s replaced (done at %.2f)", name, victim, took))
	w.mark("end")
	w.verify("end")
	return took, w.longestStall("start", "end")
}

// lostSince waits until the member is marked Lost and returns when the
// bench saw it, looking every pollFloor: the condition's own time is cut to
// the second, which would add up to a second to the row.
func lostSince(t *testing.T, ns, member string) time.Time {
	var at time.Time
	eventuallyEvery(t, pollFloor, 2*time.Minute, member+" marked lost", func() (bool, string) {
		m := &v1alpha2.EtcdMember{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: member}, m); err != nil {
			return false, err.Error()
		}
		c := conditions.Get(m.Status.Conditions, conditions.Lost)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, condString(c)
		}
		at = time.Now()
		return true, ""
	})
	return at
}

// leaderRemoval measures the write stall of removing the leader with the
// operator's hand-over and without it.
func leaderRemoval(t *testing.T, ns string) []result {
	const name = "leader"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)
	defer w.halt()
	w.requireWritesAfter("", 5, time.Minute)
	with, without := leaderRemovalStalls(t, w, ns, name)
	for _, phase := range []string{"with hand-over", "without hand-over"} {
		w.mu.Lock()
		zero := w.markTime(phase, w.start)
		w.mu.Unlock()
		began, d := w.longestStallAt(phase, phase+" done")
		fmt.Printf("leader removed %s: longest write stall %.2f s, from %.2f s; writes that failed (seconds since the scale began):\n", phase, d.Seconds(), began.Sub(zero).Seconds())
		for _, f := range w.failuresBetween(phase, phase+" done", zero) {
			fmt.Println("  " + f)
		}
	}
	w.verify("without hand-over done")
	limit := electionTimeout.Seconds()
	return []result{
		row("leader removed by the operator (hand-over): longest write stall", with.Seconds(), "s", "≤ one election timeout (1 s)", limit).withStall(with),
		row("leader removed directly through etcd (no hand-over): longest write stall", without.Seconds(), "s", "(for comparison)", 0).withStall(without),
	}
}

// rollingUpgrade upgrades a cluster through every minor with a writer and
// reports, per step, the time to reconciled and the longest write stall
// (DESIGN.md: one election per member at most, the leader's avoided by the
// hand-over, so a stall within one election timeout).
func rollingUpgrade(t *testing.T, ns string, n int32) []result {
	name := fmt.Sprintf("upgrade%d", n)
	newCluster(t, ns, name, n, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = upgradePath[0] })
	waitReconciled(t, ns, name, int(n), 5*time.Minute)
	defer func() { _ = deleteCluster(context.Background(), getCluster(t, ns, name)) }()
	w := startWriter(t, ns, name)
	defer w.halt()
	w.requireWritesAfter("", 5, time.Minute)
	var rows []result
	from := upgradePath[0]
	for _, v := range upgradePath[1:] {
		tl := watchTimeline(t, ns, name)
		start := tl.start
		stall := rollTo(t, w, ns, name, int(n), v)
		tl.stop(t, fmt.Sprintf("%s, rolled to %s (done at %.2f)", name, v, time.Since(start).Seconds()))
		began, d := w.longestStallAt("to "+v, "to "+v+" done")
		fmt.Printf("  longest write stall %.2f s, from %.2f s; writes that failed:\n", d.Seconds(), began.Sub(start).Seconds())
		for _, f := range w.failuresBetween("to "+v, "to "+v+" done", start) {
			fmt.Println("  " + f)
		}
		rows = append(rows, row(fmt.Sprintf("rolling upgrade of %d members %s → %s → reconciled", n, from, v), time.Since(start).Seconds(), "s",
			"stall ≤ one election timeout (1 s)", 0).withStall(stall))
		rows = append(rows, row(fmt.Sprintf("rolling upgrade of %d members %s → %s: longest write stall", n, from, v), stall.Seconds(), "s",
			"≤ one election timeout (1 s)", electionTimeout.Seconds()))
		from = v
	}
	w.verify("to " + upgradePath[len(upgradePath)-1] + " done")
	return rows
}

// probeCost measures what the readiness probe costs the leader, against
// /health?serializable=true, which skips the leader check: each is asked
// many times on a follower of a 3-member cluster while the leader's peer
// traffic is counted. The probe's /health is a linearizable read (the
// follower asks the leader, which confirms its leadership with every
// follower) on purpose: a member cut off from its peers turns unready.
func probeCost(t *testing.T, ns string) []result {
	const name = "probed"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	defer func() { _ = deleteCluster(context.Background(), getCluster(t, ns, name)) }()
	leader, err := leaderName(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var follower string
	for _, m := range members(t, ns, name) {
		if m.Name != leader {
			follower = m.Name
		}
	}
	p := pods(t, ns, name)
	leaderIP, followerIP := p[leader].Status.PodIP, p[follower].Status.PodIP
	const probes = 300
	ask := func(path string) (bytesPerProbe, msPerProbe float64) {
		before := peerBytes(t, leaderIP)
		start := time.Now()
		for range probes {
			resp, err := http.Get(fmt.Sprintf("http://%s:%d%s", followerIP, manifest.MetricsPort, path))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
		}
		took := time.Since(start)
		// Subtract the heartbeats the leader sends anyway over as long.
		idle := idlePeerBytes(t, leaderIP, took)
		return (peerBytes(t, leaderIP) - before - idle) / probes, float64(took.Milliseconds()) / probes
	}
	probeBytes, probeMs := ask(manifest.ReadinessPath)
	serialBytes, serialMs := ask("/health?serializable=true")
	probe := "readiness probe " + manifest.ReadinessPath + " (linearizable)"
	return []result{
		row(probe+": leader peer bytes per probe", max(probeBytes, 0), "B", "(reported)", 0),
		row("/health?serializable=true (no leader check): leader peer bytes per probe", max(serialBytes, 0), "B", "(for comparison)", 0),
		row(probe+": time per probe", probeMs, "ms", "(reported)", 0),
		row("/health?serializable=true (no leader check): time per probe", serialMs, "ms", "(for comparison)", 0),
	}
}

// peerBytes sums what a member sent to its peers (etcd's own counter).
func peerBytes(t *testing.T, ip string) float64 {
	sum := 0.0
	scrape(t, fmt.Sprintf("http://%s:%d/metrics", ip, manifest.MetricsPort), func(name string, v float64) {
		if strings.HasPrefix(name, "etcd_network_peer_sent_bytes_total") {
			sum += v
		}
	})
	return sum
}

// idlePeerBytes measures what the leader sends with no probe, over d.
func idlePeerBytes(t *testing.T, ip string, d time.Duration) float64 {
	before := peerBytes(t, ip)
	measureFor(d)
	return peerBytes(t, ip) - before
}

// steadyState creates n three-member clusters in two waves, lets them
// settle, then samples the operator's own request counters, its client's
// reads, the leader-election Lease and its memory over a minute; the live
// heap after each wave projects the memory to larger fleets.
func steadyState(t *testing.T, ns string, n int) []result {
	small := func(c *v1alpha2.EtcdCluster) {
		// Small requests, so that 3n members fit the sandbox's nodes.
		c.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
		}}
	}
	// Every third cluster runs with TLS from its own Secrets (server, peer
	// and the operator's client certificate) and authentication, so that
	// the Secrets every pass reads are part of what is measured.
	ca := newNamedCA(t, "bench CA")
	create := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			name := fmt.Sprintf("many%03d", i)
			if i%3 != 0 {
				wg.Go(func() { newCluster(t, ns, name, 3, small) })
				continue
			}
			secured := steadySecrets(t, ns, name, ca)
			wg.Go(func() {
				newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
					small(c)
					secured(c)
				})
			})
		}
		wg.Wait()
		eventually(t, 20*time.Minute, fmt.Sprintf("%d clusters reconciled", to), func() (bool, string) {
			list := &v1alpha2.EtcdClusterList{}
			if err := k.List(context.Background(), list); err != nil {
				return false, err.Error()
			}
			done := 0
			for _, c := range list.Items {
				p := conditions.Get(c.Status.Conditions, conditions.Progressing)
				if strings.HasPrefix(c.Name, "many") && c.Status.ReadyMembers == 3 && p != nil && p.Reason == conditions.ReasonReconciled {
					done++
				}
			}
			return done == to, fmt.Sprintf("%d reconciled", done)
		})
	}
	// The fleet comes in two waves; the operator's live heap after each
	// says what a cluster costs, from which its memory is projected to
	// fleets this machine cannot run.
	first := max(1, n/3)
	create(0, first)
	measureFor(90 * time.Second)
	small1 := operatorMetrics(t)
	create(first, n)
	// Let the last status writes, events and the members' first health
	// polls settle before measuring; the window below is what counts.
	measureFor(90 * time.Second)
	const window = 60 * time.Second
	renewals := countLeaseRenewals(t)
	before := operatorMetrics(t)
	measureFor(window)
	after := operatorMetrics(t)
	leases := float64(renewals()) / window.Seconds()
	writes := (after.operatorWrites - before.operatorWrites) / window.Seconds()
	uncached := (after.operatorReads - before.operatorReads) / window.Seconds()
	reads := (after.clientGets - before.clientGets) / window.Seconds()
	byResource := map[string]float64{}
	for k, v := range after.requests {
		if d := v - before.requests[k]; d > 0 {
			byResource[k] = d / window.Seconds()
		}
	}
	rss := after.rss / (1 << 20)
	cpu := (after.cpu - before.cpu) / window.Seconds()
	reconciles := (after.reconciles - before.reconciles) / window.Seconds()
	label := fmt.Sprintf("steady state, %d three-member clusters (%d with TLS and auth)", n, (n+2)/3)
	zero := 0.001 // "0 writes/s": no write in the window
	out := []result{
		row(label+": API writes by the controllers", writes, "req/s", "0", zero),
		row(label+": leader-election Lease renewals (apart)", leases, "req/s", "(one per 2 s renew period)", 0),
		row(label+": API reads past the cache by the controllers", uncached, "req/s", "(part of the next row)", 0),
		row(label+": API reads, all (the client's GET counter)", reads, "req/s", "< 1 per 30 clusters", float64(n)/30),
		row(label+": operator RSS", rss, "MiB", "< 150", 150),
		row(label+": operator CPU (average over the window)", cpu*1000, "millicores", "(reported)", 0),
		row(label+": reconciles, every controller", reconciles, "per s", "(reported)", 0),
	}
	// Where the client's requests went, by verb and resource (the
	// process's transport counts them all: caches, leader election,
	// discovery, reviews).
	for _, k := range slices.Sorted(maps.Keys(byResource)) {
		out = append(out, row(label+": API requests, "+k, byResource[k], "req/s", "(reported)", 0))
	}
	if n != 30 {
		// Linear in the clusters (an upper bound: some reads are the
		// operator's whatever the fleet).
		out = append(out, row(fmt.Sprintf("steady state, projected to 30 clusters from %d: API reads, all", n),
			reads*30/float64(n), "req/s", "< 1", 1))
	}
	if n > first {
		out = append(out, projectMemory(first, n, small1, after)...)
	}
	return out
}

// projectMemory projects the operator's memory to 30 and 1,000 clusters
// from its live heap at two fleet sizes: what a cluster adds to the heap
// (its objects in the caches, its Secrets' data, its controllers' state)
// is the slope; resident memory grows by up to twice that, as GOGC=100
// lets the heap reach twice what is live before a collection.
func projectMemory(n1, n2 int, s1, s2 sample) []result {
	mib := float64(1 << 20)
	perCluster := (s2.heapLive - s1.heapLive) / float64(n2-n1)
	label := fmt.Sprintf("steady state, memory from %d and %d clusters", n1, n2)
	out := []result{
		row(fmt.Sprintf("%s: operator live heap at %d clusters", label, n1), s1.heapLive/mib, "MiB", "(measured)", 0),
		row(fmt.Sprintf("%s: operator live heap at %d clusters", label, n2), s2.heapLive/mib, "MiB", "(measured)", 0),
		row(label+": live heap per cluster", perCluster/1024, "KiB", "(measured)", 0),
	}
	for _, at := range []int{30, 1000} {
		if at <= n2 {
			continue
		}
		rss := (s2.rss + 2*perCluster*float64(at-n2)) / mib
		target, limit := "(linear growth)", 0.0
		if at == 30 {
			target, limit = "< 150", 150
		}
		out = append(out, row(fmt.Sprintf("%s: operator RSS projected to %d clusters", label, at), rss, "MiB", target, limit))
	}
	return out
}

// steadySecrets creates a cluster's TLS and root credentials Secrets and
// returns what sets its spec to use them.
func steadySecrets(t *testing.T, ns, name string, ca *testCA) func(*v1alpha2.EtcdCluster) {
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	createTLSSecret(t, ns, name+"-server", ca.issue(t, "server", domains, both), ca.certPEM)
	createTLSSecret(t, ns, name+"-peer", ca.issue(t, "peer", domains[:2], both), ca.certPEM)
	createTLSSecret(t, ns, name+"-operator", ca.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}), nil)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-root"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("root"), "password": []byte("bench-" + name)}}
	if err := k.Create(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	return func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = ownTLS(name)
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: name + "-root"}}
	}
}

// countLeaseRenewals watches the operator's leader-election Lease and returns
// a function that stops and reports how many times it was written.
func countLeaseRenewals(t *testing.T) func() int {
	w, err := cs.CoordinationV1().Leases(operatorNS).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=aa20b3a9.etcd-operator.cozystack.io",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				n++
			}
		}
	}()
	return func() int {
		w.Stop()
		<-done
		return n
	}
}

type sample struct {
	operatorWrites, operatorReads, clientGets, rss, cpu, reconciles, heapLive float64
	// requests is etcd_operator_api_requests_total by "verb resource".
	requests map[string]float64
}

// operatorMetrics scrapes the main operator's secure metrics endpoint at its
// Pod IP, as a scraper bound to the chart's metrics-reader role.
func operatorMetrics(t *testing.T) sample {
	benchScraperOnce.Do(func() { benchScraper = scraperToken(t, "bench-metrics-reader", true) })
	code, body := getMetrics(t, operatorMetricsURL(t), benchScraper)
	if code != http.StatusOK {
		t.Fatalf("operator metrics: %d %.300s", code, body)
	}
	s := sample{requests: map[string]float64{}}
	scrapeLines(body, func(name string, v float64) {
		switch {
		case strings.HasPrefix(name, "etcd_operator_api_requests_total{"):
			s.requests[metricLabel(name, "verb")+" "+metricLabel(name, "resource")] += v
		case strings.HasPrefix(name, "etcd_operator_api_writes_total{"):
			s.operatorWrites += v
		case strings.HasPrefix(name, "etcd_operator_api_uncached_reads_total{"):
			s.operatorReads += v
		case strings.HasPrefix(name, "rest_client_requests_total{") && strings.Contains(name, `method="GET"`):
			s.clientGets += v
		case name == "process_resident_memory_bytes":
			s.rss = v
		case name == "etcd_operator_heap_live_bytes":
			s.heapLive = v
		case name == "process_cpu_seconds_total":
			s.cpu = v
		case strings.HasPrefix(name, "controller_runtime_reconcile_total{"):
			s.reconciles += v
		}
	})
	return s
}

// stallSinceFirstWrite is the longest stall from the first acknowledged
// write to the mark (for a cluster being created: its growth).
func (w *writer) stallSinceFirstWrite(to string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ackedAt) == 0 {
		return 0
	}
	hi, prev, longest := w.markTime(to, time.Now()), w.ackedAt[0], time.Duration(0)
	for _, at := range w.ackedAt[1:] {
		if !at.Before(hi) {
			break
		}
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	return max(longest, hi.Sub(prev))
}

// measureFor lets a measuring window pass: the bench counts what happens
// during it; nothing waits for a condition.
func measureFor(d time.Duration) { <-time.After(d) }

// scrape reads a Prometheus text endpoint.
func scrape(t *testing.T, url string, each func(name string, value float64)) {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	scrapeReader(resp.Body, each)
}

// benchScraper is the token the bench scrapes the operator with.
var (
	benchScraper     string
	benchScraperOnce sync.Once
)

// metricLabel is the value of a label in a scraped series' name
// (name{a="x",b="y"}).
func metricLabel(series, label string) string {
	_, rest, ok := strings.Cut(series, label+`="`)
	if !ok {
		return ""
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}

func scrapeLines(body string, each func(name string, value float64)) {
	scrapeReader(strings.NewReader(body), each)
}

func scrapeReader(r io.Reader, each func(name string, value float64)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			each(line[:i], v)
		}
	}
}

func report(t *testing.T, rows []result) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-66s %9s %-5s %7s %6s %9s  %-36s %s\n", "scenario", "value", "unit", "floor", "ratio", "stall (s)", "target", "met")
	for _, r := range rows {
		stall, met, floor, ratio := "", "-", "", ""
		if r.StallSeconds != nil {
			stall = fmt.Sprintf("%.2f", *r.StallSeconds)
		}
		if r.Met != nil {
			met = strconv.FormatBool(*r.Met)
		}
		if r.Floor != nil {
			floor, ratio = fmt.Sprintf("%.2f", *r.Floor), fmt.Sprintf("%.2f", *r.Ratio)
		}
		fmt.Fprintf(&b, "%-66s %9.2f %-5s %7s %6s %9s  %-36s %s\n", r.Scenario, r.Value, r.Unit, floor, ratio, stall, r.Target, met)
	}
	fmt.Println(b.String())
	out, _ := json.MarshalIndent(map[string]any{"date": time.Now().UTC().Format(time.RFC3339), "results": rows}, "", "  ")
	path := filepath.Join(tools.RepoRoot(), "bench", "results.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Println("wrote", path)
}

// saveOperatorLog writes the operator's whole log, with the API server's
// timestamps, to bench/operator.log: a scenario's timeline says where its
// time went, the log says why.
func saveOperatorLog(t *testing.T) {
	out, err := kubectl("-n", operatorNS, "logs", "deploy/eo-etcd-operator", "--tail=-1", "--timestamps")
	if err != nil {
		t.Logf("reading the operator's log: %v: %s", err, out)
		return
	}
	path := filepath.Join(tools.RepoRoot(), "bench", "operator.log")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Logf("saving the operator's log: %v", err)
		return
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Logf("saving the operator's log: %v", err)
		return
	}
	fmt.Println("wrote", path)
}

// failuresBetween describes the writes that failed between two marks, each
// with when it was called (seconds since zero) and how long it took.
func (w *writer) failuresBetween(from, to string, zero time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo, hi := w.markTime(from, w.start), w.markTime(to, time.Now())
	var out []string
	for _, f := range w.failures {
		if !f.call.Before(lo) && f.call.Before(hi) {
			out = append(out, fmt.Sprintf("%6.2f  a write failed after %.2f s: %s", f.call.Sub(zero).Seconds(), f.took.Seconds(), f.err))
		}
	}
	return out
}
