package sandbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStopNodeReplacesPod: a Deployment's Pod on a node that stops is
// evicted once the node is NotReady and replaced on another node; when the
// node starts again it finalises the evicted Pod.
func TestStopNodeReplacesPod(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	one := int32(1)
	labels := map[string]string{"app": "survivor"}
	pod := helperPod("survivor", []string{"sleep"}, func(p *corev1.Pod) {
		// Only this test tolerates the reserved node, and it prefers it.
		p.Spec.Tolerations = []corev1.Toleration{{Key: taintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{stopNode}}},
			}}},
		}}
	})
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	if _, err := k.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := waitDeploymentPod(t, ns, func(p *corev1.Pod) bool { return p.Spec.NodeName == stopNode }, 60*time.Second)

	if err := sb.StopNode(ctx, stopNode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.StartNode(context.Background(), stopNode) })
	stopped := time.Now()
	waitDeploymentPod(t, ns, func(p *corev1.Pod) bool { return p.UID != first.UID && p.Spec.NodeName != stopNode }, 90*time.Second)
	t.Logf("replaced %s after the node stopped", time.Since(stopped).Round(time.Second))

	if err := sb.StartNode(ctx, stopNode); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the evicted Pod to be finalised by the restarted node", func() (bool, string) {
		_, err := k.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	waitFor(t, 30*time.Second, stopNode+" Ready again", func() (bool, string) {
		n, err := k.CoreV1().Nodes().Get(ctx, stopNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeReady(n), fmt.Sprint(n.Status.Conditions)
	})
}

// waitDeploymentPod waits for a Running Pod of the namespace that matches.
func waitDeploymentPod(t *testing.T, ns string, match func(*corev1.Pod) bool, timeout time.Duration) corev1.Pod {
	t.Helper()
	var found corev1.Pod
	waitFor(t, timeout, "a matching Running Pod", func() (bool, string) {
		pods, err := k.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if running(p) && match(p) {
				found = *p
				return true, ""
			}
			seen = append(seen, p.Name+": "+podSummary(p))
		}
		return false, fmt.Sprint(seen)
	})
	return found
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
