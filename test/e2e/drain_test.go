package e2e

import (
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestDrainKeepsQuorum drains the node of every member in turn with kubectl:
// evictions go through the voters-only PodDisruptionBudget, so at no moment
// are fewer than a quorum of voters ready, and each member comes back on
// another node with its data. The first drain races a roll-out: the
// operator's restarts go through the Eviction API too, so the budget holds
// whichever comes second (issue 20, claim 9). It moves Pods between nodes,
// so it runs alone.
func TestDrainKeepsQuorum(t *testing.T) {
	ns := namespace(t, "e2e-drain")
	const name = "drained"
	// One member per node, so that every drain moves exactly one member.
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) { c.Spec.Affinity = oneMemberPerNode(name) })
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	ids := map[string]string{}
	for _, m := range members(t, ns, name) {
		ids[m.Name] = m.Status.MemberID
	}
	w := startWriter(t, ns, name)
	var fewest atomic.Int32
	fewest.Store(3)
	stop := watchReadyVoters(t, ns, name, &fewest)
	w.mark("draining")
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("110m")}}
	})
	for _, m := range members(t, ns, name) {
		node := pods(t, ns, name)[m.Name].Spec.NodeName
		out, err := kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=4m",
			"--pod-selector", manifest.LabelCluster+"="+name)
		if err != nil {
			t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
		}
		waitReconciled(t, ns, name, 3, 3*time.Minute)
		if out, err := kubectl("uncordon", node); err != nil {
			t.Fatalf("kubectl uncordon %s: %v\n%s", node, err, out)
		}
	}
	stop()
	w.mark("drained")
	// The budget keeps a quorum through every drain: writes go on.
	w.requireWritesBetween("draining", "drained", 1)
	t.Logf("drains: longest write stall %s", w.longestStall("draining", "drained").Round(time.Millisecond))
	if n := fewest.Load(); n < 2 {
		t.Errorf("only %d voters were ready at one point during the drains; a quorum of 3 is 2", n)
	}
	for _, p := range pods(t, ns, name) {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "110m" {
			t.Errorf("pod %s runs with %s CPU: the roll-out did not complete", p.Name, got)
		}
	}
	for _, m := range members(t, ns, name) {
		if ids[m.Name] != m.Status.MemberID {
			t.Errorf("member %s changed identity during the drain (%s → %s)", m.Name, ids[m.Name], m.Status.MemberID)
		}
	}
	w.verify("drained")
}

// watchReadyVoters records the fewest ready voter Pods seen until stopped.
func watchReadyVoters(t *testing.T, ns, name string, fewest *atomic.Int32) func() {
	return every(100*time.Millisecond, func() {
		n := int32(0)
		for _, p := range pods(t, ns, name) {
			if p.Labels[manifest.LabelRole] == manifest.RoleVoter && podIsReady(p.Status.Conditions) && p.DeletionTimestamp == nil {
				n++
			}
		}
		if n < fewest.Load() {
			fewest.Store(n)
			t.Logf("%s ready voters: %d", time.Now().Format(time.StampMilli), n)
		}
	})
}
