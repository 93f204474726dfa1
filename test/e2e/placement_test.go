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

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

func init() { suiteNamespaces = append(suiteNamespaces, "e2e-placement") }

// The taint and label of the drill's dedicated node, as a platform team
// marks nodes kept for etcd.
const (
	dedicatedKey   = "e2e.example/dedicated"
	dedicatedValue = "etcd"
)

// TestPlacementOnTaintedNode puts etcd where examples/control-plane.yaml
// does, on nodes tainted and labelled for it (here three sandbox nodes
// marked as a platform team marks dedicated nodes): tolerated, selected,
// one member per node, with a priority class. The cluster runs there
// under a writer; one selecting the nodes without tolerating their taint
// is left Pending by the scheduler, and says why. It taints nodes, so it
// runs alone, before the parallel suites.
func TestPlacementOnTaintedNode(t *testing.T) {
	ns := namespace(t, "e2e-placement")
	nodes := dedicateNodes(t, 3)
	if out, err := kubectlStdin("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: e2e-etcd-critical}\nvalue: 1000000\n", "apply", "-f", "-"); err != nil {
		t.Fatalf("creating the PriorityClass: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = kubectl("delete", "priorityclass", "e2e-etcd-critical", "--ignore-not-found") })

	newCluster(t, ns, "dedicated", 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.NodeSelector = map[string]string{dedicatedKey: dedicatedValue}
		c.Spec.Tolerations = []corev1.Toleration{{Key: dedicatedKey, Operator: corev1.TolerationOpEqual, Value: dedicatedValue, Effect: corev1.TaintEffectNoSchedule}}
		c.Spec.Affinity = oneMemberPerNode("dedicated")
		c.Spec.PriorityClassName = "e2e-etcd-critical"
	})
	w := startWriter(t, ns, "dedicated")
	waitReconciled(t, ns, "dedicated", 3, 5*time.Minute)
	w.mark("placed")
	w.requireWritesAfter("placed", 10, time.Minute)
	used := map[string]bool{}
	for name, p := range pods(t, ns, "dedicated") {
		if !slices.Contains(nodes, p.Spec.NodeName) || used[p.Spec.NodeName] {
			t.Errorf("member %s runs on %s; want one member on each of the dedicated nodes %v", name, p.Spec.NodeName, nodes)
		}
		used[p.Spec.NodeName] = true
		if p.Spec.Priority == nil || *p.Spec.Priority != 1000000 {
			t.Errorf("member %s has priority %v, not the PriorityClass's", name, p.Spec.Priority)
		}
	}

	// Selecting the node without tolerating its taint: the scheduler
	// refuses, and the cluster waits for it.
	newCluster(t, ns, "untolerated", 1, func(c *v1alpha2.EtcdCluster) {
		c.Spec.NodeSelector = map[string]string{dedicatedKey: dedicatedValue}
	})
	eventually(t, 2*time.Minute, "the untolerating member's Pod is refused by the scheduler", func() (bool, string) {
		for _, p := range pods(t, ns, "untolerated") {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					return strings.Contains(c.Message, "untolerated taint"), c.Message
				}
			}
			return false, fmt.Sprintf("pod %s on %q, phase %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
		return false, "no Pod yet"
	})
	if c := conditions.Get(getCluster(t, ns, "untolerated").Status.Conditions, conditions.Available); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("the cluster whose member cannot be scheduled says Available: %+v", c)
	}
	w.verify("placed")
}

// dedicateNodes labels and taints n nodes that do not run the operator,
// for the test's duration, and returns their names.
func dedicateNodes(t *testing.T, n int) []string {
	t.Helper()
	operator := operatorNode(t)
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, node := range list.Items {
		if node.Name != operator && !node.Spec.Unschedulable && len(node.Spec.Taints) == 0 && len(nodes) < n {
			nodes = append(nodes, node.Name)
		}
	}
	if len(nodes) < n {
		t.Fatalf("only %d untainted nodes beside the operator's to dedicate, want %d", len(nodes), n)
	}
	taint := dedicatedKey + "=" + dedicatedValue + ":" + string(corev1.TaintEffectNoSchedule)
	t.Cleanup(func() {
		// Released first, so later suites have the nodes back.
		release(t, "e2e-placement")
		for _, node := range nodes {
			_, _ = kubectl("taint", "node", node, taint+"-")
			_, _ = kubectl("label", "node", node, dedicatedKey+"-")
		}
	})
	for _, node := range nodes {
		if out, err := kubectl("label", "node", node, dedicatedKey+"="+dedicatedValue); err != nil {
			t.Fatalf("labelling node %s: %v\n%s", node, err, out)
		}
		if out, err := kubectl("taint", "node", node, taint); err != nil {
			t.Fatalf("tainting node %s: %v\n%s", node, err, out)
		}
	}
	return nodes
}
