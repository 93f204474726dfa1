package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// spreadAwayFromOperator keeps members on distinct nodes and off the node the
// operator runs on, so that losing a member's node never takes the operator.
func spreadAwayFromOperator(t *testing.T, name string) func(*v1alpha2.EtcdCluster) {
	node := operatorNode(t)
	return func(c *v1alpha2.EtcdCluster) {
		c.Spec.Affinity = oneMemberPerNode(name)
		c.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{node},
			}}}},
		}}
	}
}

// oneMemberPerNode keeps the cluster's members on distinct nodes.
func oneMemberPerNode(cluster string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey:   corev1.LabelHostname,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{manifest.LabelCluster: cluster}},
	}}}}
}

func operatorNode(t *testing.T) string {
	t.Helper()
	list, err := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("finding the operator pod: %v (%d pods)", err, len(list.Items))
	}
	return list.Items[0].Spec.NodeName
}

// TestNodeLossReplacesMember stops the node of a member: its Pods die and it
// stops heartbeating. The member is replaced on another node while quorum
// holds, and when the node comes back nothing of the old member lingers.
// It disrupts a node, so it runs alone, before the parallel suites.
func TestNodeLossReplacesMember(t *testing.T) {
	ns := namespace(t, "e2e-nodeloss")
	const name = "lonely"
	newCluster(t, ns, name, 3, spreadAwayFromOperator(t, name))
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	id := getCluster(t, ns, name).Status.ClusterID
	w := startWriter(t, ns, name)
	victim := members(t, ns, name)[1].Name
	node := pods(t, ns, name)[victim].Spec.NodeName
	ctx := context.Background()
	w.mark("node stopped")
	if err := sb.StopNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.StartNode(context.Background(), node)
		}
	})
	waitReplaced(t, ns, name, victim, 3, 4*time.Minute)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("replaced")
	w.requireWritesBetween("node stopped", "replaced", 1)
	t.Logf("node loss: longest write stall %s", w.longestStall("node stopped", "replaced").Round(time.Millisecond))
	if err := sb.StartNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, 2*time.Minute, "the old member's pod finalized once its node is back", func() (bool, string) {
		_, there := pods(t, ns, name)[victim]
		return !there, "pod " + victim + " still there"
	})
	if got := getCluster(t, ns, name).Status.ClusterID; got != id {
		t.Errorf("cluster ID changed from %s to %s", id, got)
	}
	waitReconciled(t, ns, name, 3, time.Minute)
	w.verify("replaced")
}
