package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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

// TestSpecEditMidScaleWaitsForTheBoundary edits replicas while a scale is
// under way: the operator finishes the target it latched first (5 members,
// every learner promoted) and only then adopts the edit.
func TestSpecEditMidScaleWaitsForTheBoundary(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-specedit")
	const name = "edited"
	newCluster(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 2*time.Minute)
	w := startWriter(t, ns, name)
	var most atomic.Int32
	stop := watchMembers(t, ns, name, &most)
	setReplicas(t, ns, name, 5)
	eventually(t, 2*time.Minute, "the scale under way", func() (bool, string) {
		n := len(members(t, ns, name))
		return n >= 3, fmt.Sprintf("%d members", n)
	})
	setReplicas(t, ns, name, 3)
	if got := getCluster(t, ns, name).Status.Observed.Replicas; got != 5 {
		t.Errorf("right after the edit the target is %d, want the latched 5", got)
	}
	waitReconciled(t, ns, name, 3, 4*time.Minute)
	w.mark("reconciled")
	stop()
	if most.Load() < 5 {
		t.Errorf("the cluster went to 3 without reaching the latched 5 first (at most %d members)", most.Load())
	}
	// A promoted member can be removed within a second of its promotion, too
	// fast to sample; the operator's Events record the order instead.
	eventually(t, 30*time.Second, "4 promotions before the edit was adopted", func() (bool, string) {
		return promotedBeforeAdopting(t, ns, name, "3 members")
	})
	w.verify("reconciled")
}

// watchMembers records the most EtcdMembers seen until stopped. A member
// lives from its creation through its Pod's start and its promotion, seconds
// at least, so sampling cannot miss one.
func watchMembers(t *testing.T, ns, name string, most *atomic.Int32) func() {
	return every(200*time.Millisecond, func() {
		list := &v1alpha2.EtcdMemberList{}
		if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: name}); err != nil {
			return
		}
		if n := int32(len(list.Items)); n > most.Load() {
			most.Store(n)
		}
	})
}

// promotedBeforeAdopting reads the cluster's Events: at least 4 learners
// promoted (1 to 5), all before the spec edit whose note contains adopted
// was adopted.
func promotedBeforeAdopting(t *testing.T, ns, name, adopted string) (bool, string) {
	t.Helper()
	list, err := cs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	var promotions []time.Time
	var adoption time.Time
	for _, e := range list.Items {
		if e.Regarding.Kind != "EtcdCluster" || e.Regarding.Name != name {
			continue
		}
		switch {
		case e.Reason == "MemberPromoted":
			promotions = append(promotions, e.EventTime.Time)
		case e.Reason == conditions.ReasonSpecChanged && strings.Contains(e.Note, adopted):
			adoption = e.EventTime.Time
		}
	}
	late := 0
	for _, p := range promotions {
		if adoption.IsZero() || p.After(adoption) {
			late++
		}
	}
	seen := fmt.Sprintf("%d promotions, %d of them not before the adoption at %s", len(promotions), late, adoption)
	return len(promotions) >= 4 && late == 0, seen
}

// TestImpossibleTargetThenFixed asks for members no node can run: the
// operator reports DeadlineExceeded, keeps the cluster available, and a spec
// edit that removes the obstacle reaches the target.
func TestImpossibleTargetThenFixed(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-deadline")
	const name = "stuck"
	newCluster(t, ns, name, 1, func(c *v1alpha2.EtcdCluster) { c.Spec.ProgressDeadlineSeconds = ptr.To[int32](30) })
	waitReconciled(t, ns, name, 1, 2*time.Minute)
	w := startWriter(t, ns, name)
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Replicas = ptr.To[int32](3)
		c.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "e2e.example/no-such-node", Operator: corev1.NodeSelectorOpExists,
			}}}},
		}}}
	})
	eventually(t, 2*time.Minute, "DeadlineExceeded", func() (bool, string) {
		c := getCluster(t, ns, name)
		p := conditions.Get(c.Status.Conditions, conditions.Progressing)
		return p != nil && p.Reason == conditions.ReasonDeadlineExceeded, condString(p)
	})
	if a := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Available); a == nil || a.Status != "True" {
		t.Errorf("the cluster should stay available on its voter: %s", condString(a))
	}
	w.mark("stuck")
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Affinity = nil })
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("fixed")
	// The voter kept serving while the target was out of reach.
	w.requireWritesBetween("", "stuck", 1)
	w.verify("fixed")
}

func patchCluster(t *testing.T, ns, name string, edit func(*v1alpha2.EtcdCluster)) {
	t.Helper()
	c := getCluster(t, ns, name)
	patch := client.MergeFrom(c.DeepCopy())
	edit(c)
	if err := k.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}
