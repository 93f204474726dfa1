package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestQuorumLossRecovered loses two of three members for good (their
// volumes wiped, their etcd killed) and recovers the cluster from the one
// left, on real etcd processes: the cluster reports the loss and does
// nothing by itself; the dry run reports the plan and changes no member,
// Pod or claim; the plan's token restarts the survivor alone with
// --force-new-cluster and the cluster grows back to three. Every write
// acknowledged before the loss is there afterwards, and a second writer,
// started during the outage, is served again. A Prometheus configured from
// the chart's monitors and alert rules scrapes the members and the operator
// all along: the no-leader alert fires during the outage and clears once
// the cluster is recovered.
func TestQuorumLossRecovered(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-recover")
	const name = "phoenix"
	prom := startPrometheus(t, ns)
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	// The members' own series, labelled by the PodMonitor's relabelings.
	eventually(t, 2*time.Minute, "the members scraped", func() (bool, string) {
		v, _, err := prom.value(fmt.Sprintf(`count(etcd_server_has_leader{etcd_cluster_namespace=%q,etcd_cluster=%q} == 1)`, ns, name))
		return err == nil && v == 3, fmt.Sprintf("%v members with a leader (%v)", v, err)
	})
	id := getCluster(t, ns, name).Status.ClusterID
	before := startWriter(t, ns, name)
	eventually(t, time.Minute, "some writes", func() (bool, string) { return before.count() > 20, "" })

	ms := members(t, ns, name)
	survivor, victims := ms[0].Name, []string{ms[1].Name, ms[2].Name}
	ctx := context.Background()
	destroy := func(m string) {
		if err := injector().Wipe(ctx, ns, manifest.PVCName(m)); err != nil {
			t.Fatal(err)
		}
		if err := injector().Kill(ctx, ns, m, manifest.EtcdContainer); err != nil {
			t.Fatal(err)
		}
	}
	before.mark("first lost")
	destroy(victims[0])
	// Two members are a quorum: writes go on, and each one acknowledged
	// is in the survivor's log.
	before.requireWritesAfter("first lost", 5, 2*time.Minute)
	before.halt()
	// The survivor learns the last commit with the leader's next
	// heartbeat; force-new-cluster keeps only what it knows committed.
	waitCaughtUp(t, ns, name, survivor, victims[1])
	destroy(victims[1])
	during := startWriterIn(t, ns, name, name+"-outage")
	lostAt := time.Now()

	eventually(t, 3*time.Minute, "quorum loss reported", func() (bool, string) {
		c := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost && strings.Contains(c.Message, "gone:"), condString(c)
	})
	t.Logf("quorum loss reported after %s", time.Since(lostAt).Round(time.Second))
	// The rule's 1m "for" runs out before the operator is asked anything.
	prom.waitAlert(t, "EtcdClusterNoLeader", ns, name, "firing", 3*time.Minute)
	t.Logf("EtcdClusterNoLeader firing after %s", time.Since(lostAt).Round(time.Second))
	snapshot := objectsOf(t, ns, name)
	annotateRecover(t, ns, name, manifest.RecoverDryRun)
	var plan *v1alpha2.RecoveryStatus
	eventually(t, time.Minute, "the plan", func() (bool, string) {
		plan = getCluster(t, ns, name).Status.Recovery
		return plan != nil && plan.Phase == v1alpha2.RecoveryPlanned, fmt.Sprintf("%+v", plan)
	})
	t.Logf("plan after %s: %s", time.Since(lostAt).Round(time.Second), plan.Message)
	if plan.Survivor.Name != survivor || len(plan.Discarded) != 2 {
		t.Fatalf("the plan keeps %s and discards %+v; want %s and the two wiped", plan.Survivor.Name, plan.Discarded, survivor)
	}
	// What a dry run would change, it changes within seconds of its plan.
	consistently(t, 5*time.Second, "the dry run changed nothing", func() (bool, string) {
		diff := diffObjects(snapshot, objectsOf(t, ns, name))
		return diff == "", diff
	})

	during.mark("consent")
	consentAt := time.Now()
	annotateRecover(t, ns, name, plan.Token)
	eventually(t, 5*time.Minute, "recovery completed", func() (bool, string) {
		r := getCluster(t, ns, name).Status.Recovery
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted, fmt.Sprintf("%+v", r)
	})
	t.Logf("recovery completed %s after consent", time.Since(consentAt).Round(time.Second))
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	prom.waitAlert(t, "EtcdClusterNoLeader", ns, name, "", 2*time.Minute)
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("the cluster ID changed from %s to %s", id, got)
	}
	names := memberNames(members(t, ns, name))
	for _, v := range victims {
		if strings.Contains(strings.Join(names, ","), v) {
			t.Errorf("discarded member %s is still there: %v", v, names)
		}
	}
	if !strings.Contains(strings.Join(names, ","), survivor) {
		t.Errorf("the survivor %s is gone: %v", survivor, names)
	}
	if err := etcdMatchesMembers(t, ns, name); err != nil {
		t.Error(err)
	}
	before.verify("")
	during.verify("consent")
	t.Logf("writes served again %s after consent", during.firstAckAfter("consent").Sub(consentAt).Round(time.Second))
}

// TestQuorumLossRecoveredFromSnapshot rebuilds a cluster that lost two of
// its three members from a named EtcdSnapshot instead of the survivor: the
// plan discards every member; once consented, they go, a new seed restores
// the snapshot (a new cluster ID) and the cluster grows back to three with
// exactly the snapshot's keys.
func TestQuorumLossRecoveredFromSnapshot(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-recoversnap")
	newClaim(t, ns, "backups")
	const name = "restored"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	id := getCluster(t, ns, name).Status.ClusterID
	want := writeKeys(t, ns, name, 200)
	snap := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "before-loss", Namespace: ns},
		Spec:       v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: name}, Destination: pvcLocation("backups", name)},
	}
	if err := k.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, ns, snap.Name, v1alpha2.SnapshotComplete, "", 5*time.Minute)
	putKey(t, ns, name, "data/after-snapshot", "lost with the members")
	ms := members(t, ns, name)
	for _, m := range ms[1:] {
		if err := injector().Wipe(context.Background(), ns, manifest.PVCName(m.Name)); err != nil {
			t.Fatal(err)
		}
		if err := injector().Kill(context.Background(), ns, m.Name, manifest.EtcdContainer); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 3*time.Minute, "quorum loss reported", func() (bool, string) {
		c := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost, condString(c)
	})
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationRecoverFromSnapshot, snap.Name)
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationRecover, manifest.RecoverDryRun)
	})
	var plan *v1alpha2.RecoveryStatus
	eventually(t, time.Minute, "the plan", func() (bool, string) {
		plan = getCluster(t, ns, name).Status.Recovery
		return plan != nil && plan.Phase == v1alpha2.RecoveryPlanned, fmt.Sprintf("%+v", plan)
	})
	if plan.Snapshot != snap.Name || plan.Survivor != nil || len(plan.Discarded) != 3 || plan.Restore == nil {
		t.Fatalf("plan %+v", plan)
	}
	annotateRecover(t, ns, name, plan.Token)
	eventually(t, 6*time.Minute, "recovery completed", func() (bool, string) {
		r := getCluster(t, ns, name).Status.Recovery
		return r != nil && r.Phase == v1alpha2.RecoveryCompleted, fmt.Sprintf("%+v", r)
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	if got := getCluster(t, ns, name).Status.ClusterID; got == id || got == "" {
		t.Errorf("cluster ID %q after a rebuild from a snapshot of %s", got, id)
	}
	for _, m := range members(t, ns, name) {
		for _, old := range ms {
			if m.Name == old.Name {
				t.Errorf("member %s outlived the rebuild", m.Name)
			}
		}
	}
	if got := readKeys(t, ns, name); len(got) != len(want) {
		t.Errorf("%d keys after the rebuild, want the snapshot's %d; first difference: %s", len(got), len(want), firstDifference(got, want))
	}
	w := startWriter(t, ns, name)
	w.mark("rebuilt")
	w.verify("rebuilt")
}

// putKey writes one key.
func putKey(t *testing.T, ns, cluster, key, value string) {
	t.Helper()
	c, err := clusterClient(ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits until the survivor has applied as much as the other
// member that still runs.
func waitCaughtUp(t *testing.T, ns, cluster, survivor, other string) {
	t.Helper()
	eventually(t, time.Minute, survivor+" caught up with "+other, func() (bool, string) {
		a, errA := appliedIndex(ns, cluster, survivor)
		b, errB := appliedIndex(ns, cluster, other)
		return errA == nil && errB == nil && a >= b, fmt.Sprintf("%d vs %d (%v, %v)", a, b, errA, errB)
	})
}

// appliedIndex asks one member's etcd for its applied index.
func appliedIndex(ns, cluster, member string) (uint64, error) {
	ep := fmt.Sprintf("http://%s.%s.%s.svc:2379", member, cluster, ns)
	c, err := dialCluster(ns, cluster, []string{ep})
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := c.Status(ctx, ep)
	if err != nil {
		return 0, err
	}
	return st.RaftAppliedIndex, nil
}

func annotateRecover(t *testing.T, ns, name, value string) {
	t.Helper()
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationRecover, value)
	})
}

// objectsOf records what a dry run must not change: each member's spec
// generation and metadata, each Pod's identity and metadata, each claim's
// resource version.
func objectsOf(t *testing.T, ns, cluster string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range members(t, ns, cluster) {
		out["member/"+m.Name] = fmt.Sprintf("gen=%d %v %v %v", m.Generation, m.Labels, m.Annotations, m.Finalizers)
	}
	for n, p := range pods(t, ns, cluster) {
		out["pod/"+n] = fmt.Sprintf("%s %v %v", p.UID, p.Labels, p.Annotations)
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := k.List(context.Background(), pvcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		out["pvc/"+p.Name] = p.ResourceVersion
	}
	return out
}

func diffObjects(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %q -> %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new %q", k, v))
		}
	}
	return strings.Join(out, "; ")
}
