package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestDefragReclaimsSpace runs EtcdDefrags on real etcd under a writer and
// a reader: after a large key range was deleted and compacted, a run with a
// threshold defragments the members etcd reports enough free space of (they
// give it back) and skips, with its reason, a member already compact
// (defragmented by hand first); a run of every member takes the leader
// last; the cluster serves throughout. Then a policy firing every 20 s
// makes runs and keeps one.
func TestDefragReclaimsSpace(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-defrag")
	const name = "frag"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	fillAndFree(t, ns, name, 160, 100<<10)
	ms := members(t, ns, name)
	compact := etcdFollower(t, ns, name, ms)
	defragDirect(t, ns, name, compact)

	w := startWriter(t, ns, name)
	w.mark("defrag")
	// A threshold: the member defragmented by hand is skipped, with its
	// reason; a member etcd reports enough space of is defragmented.
	first := waitDefrag(t, ns, createDefrag(t, ns, name, "reclaim", &v1alpha2.DefragRule{FreeSpaceAbove: ptr.To(resource.MustParse("8Mi"))}), 5*time.Minute)
	checkThresholdRun(t, first, compact)
	// Every member, the leader last.
	second := waitDefrag(t, ns, createDefrag(t, ns, name, "everything", &v1alpha2.DefragRule{All: true}), 5*time.Minute)
	w.mark("defragged")
	checkWholeRun(t, second)
	// The two runs can take less than a second, less than one write takes
	// on a loaded machine, so writes are required once they are done (the
	// cluster kept its quorum and serves), and the stall over the runs is
	// reported.
	w.requireWritesAfter("defragged", 1, time.Minute)
	t.Logf("two defrag runs: %d writes acknowledged during them, longest write stall %s",
		w.ackedBetween("defrag", "defragged"), w.longestStall("defrag", "defragged").Round(time.Millisecond))

	policy := &v1alpha2.EtcdDefragPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "often", Namespace: ns},
		Spec: v1alpha2.EtcdDefragPolicySpec{ClusterRef: corev1.LocalObjectReference{Name: name}, Schedule: "@every 20s",
			HistoryLimit: ptr.To[int32](1), Rule: &v1alpha2.DefragRule{All: true}},
	}
	if err := k.Create(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the policy ran twice and kept one run", func() (bool, string) {
		p := &v1alpha2.EtcdDefragPolicy{}
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(policy), p); err != nil {
			return false, err.Error()
		}
		runs := policyRuns(t, ns, policy.Name)
		stamped := eventCount(t, ns, "StampedRun")
		return stamped >= 2 && len(runs) <= 1 && p.Status.LastSuccessfulTime != nil,
			fmt.Sprintf("%d runs stamped, %d kept (%v), last success %v", stamped, len(runs), runs, p.Status.LastSuccessfulTime)
	})
	if err := k.Delete(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	w.verify("defragged")
}

// TestDefragClearsNOSPACE fills a cluster with a small quota until etcd
// refuses writes (NOSPACE), frees the space, and has a defrag give it back:
// the alarm is disarmed and writes are acknowledged again.
func TestDefragClearsNOSPACE(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-nospace")
	const name = "full"
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](24 << 20)}
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	value := strings.Repeat("n", 256<<10)
	full := false
	for i := 0; i < 400 && !full; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("fill/%05d", i), value)
		cancel()
		switch {
		case err != nil && strings.Contains(err.Error(), "database space exceeded"):
			full = true
		case err != nil:
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if !full {
		t.Fatal("the quota was never reached")
	}
	eventually(t, 2*time.Minute, "the alarm reported", func() (bool, string) {
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason == conditions.ReasonAlarm && strings.Contains(d.Message, "NOSPACE"), condString(d)
	})
	freeAll(t, c, "fill/")
	run := createDefrag(t, ns, name, "unjam", &v1alpha2.DefragRule{All: true})
	if done := waitDefrag(t, ns, run, 5*time.Minute); done.Status.Phase != v1alpha2.DefragComplete {
		t.Fatalf("defrag %s: %+v", done.Status.Phase, done.Status.Conditions)
	}
	eventually(t, 2*time.Minute, "writes acknowledged again", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Put(ctx, "after", "space")
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, time.Minute, "no alarm reported", func() (bool, string) {
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason != conditions.ReasonAlarm, condString(d)
	})
}

// fillAndFree writes n values of size bytes, then deletes them and compacts,
// so every member's database holds about n*size bytes it does not use.
func fillAndFree(t *testing.T, ns, cluster string, n, size int) {
	t.Helper()
	c, err := clusterClient(ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	value := strings.Repeat("f", size)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("bulk/%05d", i), value)
		cancel()
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	freeAll(t, c, "bulk/")
}

// freeAll deletes the prefix and compacts the history, physically.
func freeAll(t *testing.T, c *clientv3.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// etcdFollower names a member etcd does not have as leader.
func etcdFollower(t *testing.T, ns, cluster string, ms []v1alpha2.EtcdMember) string {
	t.Helper()
	for _, m := range ms {
		ep := fmt.Sprintf("http://%s.%s.%s.svc:2379", m.Name, cluster, ns)
		c, err := dialCluster(ns, cluster, []string{ep})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Status(ctx, ep)
		cancel()
		_ = c.Close()
		if err == nil && st.Leader != st.Header.MemberId {
			return m.Name
		}
	}
	t.Fatal("no follower")
	return ""
}

// defragDirect defragments one member by hand, through etcd.
func defragDirect(t *testing.T, ns, cluster, member string) {
	t.Helper()
	ep := fmt.Sprintf("http://%s.%s.%s.svc:2379", member, cluster, ns)
	c, err := dialCluster(ns, cluster, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Defragment(ctx, ep); err != nil {
		t.Fatal(err)
	}
}

func createDefrag(t *testing.T, ns, cluster, name string, rule *v1alpha2.DefragRule) *v1alpha2.EtcdDefrag {
	t.Helper()
	d := &v1alpha2.EtcdDefrag{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: cluster}, Rule: rule},
	}
	if err := k.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDefrag waits until the run finished.
func waitDefrag(t *testing.T, ns string, d *v1alpha2.EtcdDefrag, timeout time.Duration) *v1alpha2.EtcdDefrag {
	t.Helper()
	got := &v1alpha2.EtcdDefrag{}
	eventually(t, timeout, "defrag "+d.Name+" finished", func() (bool, string) {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha2.DefragComplete || got.Status.Phase == v1alpha2.DefragFailed, string(got.Status.Phase)
	})
	return got
}

// checkThresholdRun: the compact member skipped with its reason; the
// members defragmented gave back more than the threshold.
func checkThresholdRun(t *testing.T, d *v1alpha2.EtcdDefrag, compact string) {
	t.Helper()
	if d.Status.Phase != v1alpha2.DefragComplete {
		t.Fatalf("defrag %s: %+v", d.Status.Phase, d.Status.Conditions)
	}
	defragmented := 0
	for _, m := range d.Status.Members {
		t.Logf("%s (%s): %s %s, %d -> %d bytes, reclaimed %d", m.Name, m.Role, m.Outcome, m.Reason, m.DBSizeBefore, m.DBSizeAfter, m.ReclaimedBytes)
		switch {
		case m.Name == compact && (m.Outcome != v1alpha2.DefragOutcomeSkipped || m.Reason != "BelowThreshold"):
			t.Errorf("the compact member %s: %s/%s, want Skipped/BelowThreshold", m.Name, m.Outcome, m.Reason)
		case m.Outcome == v1alpha2.DefragOutcomeDefragmented:
			defragmented++
			if m.ReclaimedBytes < 8<<20 || m.DBSizeAfter >= m.DBSizeBefore {
				t.Errorf("%s was defragmented but gave back %d bytes (%d -> %d)", m.Name, m.ReclaimedBytes, m.DBSizeBefore, m.DBSizeAfter)
			}
		}
	}
	// etcd's dbSizeInUse, which the rule reads, can lag a compaction for a
	// while (the run of every member below gives the space back where it
	// said there was none), so no member is required to be over it.
	t.Logf("%d members over the threshold by etcd's report", defragmented)
}

// checkWholeRun: every member defragmented, the leader last, and the space
// the deleted range held given back on each member that had it.
func checkWholeRun(t *testing.T, d *v1alpha2.EtcdDefrag) {
	t.Helper()
	if d.Status.Phase != v1alpha2.DefragComplete {
		t.Fatalf("defrag %s: %+v", d.Status.Phase, d.Status.Conditions)
	}
	var leaderAt, lastFollowerAt time.Time
	for _, m := range d.Status.Members {
		t.Logf("%s (%s): %s %s, %d -> %d bytes, reclaimed %d", m.Name, m.Role, m.Outcome, m.Reason, m.DBSizeBefore, m.DBSizeAfter, m.ReclaimedBytes)
		if m.Outcome != v1alpha2.DefragOutcomeDefragmented || m.FinishedAt == nil {
			t.Errorf("%s: %s %s, want Defragmented", m.Name, m.Outcome, m.Reason)
			continue
		}
		if m.DBSizeBefore > 8<<20 && m.DBSizeAfter > 8<<20 {
			t.Errorf("%s kept %d of %d bytes", m.Name, m.DBSizeAfter, m.DBSizeBefore)
		}
		if m.Role == v1alpha2.DefragRoleLeader {
			leaderAt = m.FinishedAt.Time
		} else if m.FinishedAt.After(lastFollowerAt) {
			lastFollowerAt = m.FinishedAt.Time
		}
	}
	if leaderAt.IsZero() || leaderAt.Before(lastFollowerAt) {
		t.Errorf("the leader was not defragmented last (leader %s, last follower %s)", leaderAt, lastFollowerAt)
	}
}

// policyRuns lists the runs a policy made.
func policyRuns(t *testing.T, ns, policy string) []string {
	t.Helper()
	list := &v1alpha2.EtcdDefragList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelDefragPolicy: policy}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range list.Items {
		out = append(out, d.Name+"="+string(d.Status.Phase))
	}
	return out
}

// eventCount counts the Events of a reason in the namespace.
func eventCount(t *testing.T, ns, reason string) int {
	t.Helper()
	out, err := kubectl("-n", ns, "get", "events", "--field-selector", "reason="+reason, "-o", "name")
	if err != nil {
		t.Fatal(errors.New(out))
	}
	return len(strings.Fields(out))
}
