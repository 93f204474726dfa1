package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Members that share a node, and the nodes around them.

// onNodes places the members' Pods: node names in member order, scheduled
// an hour before t0.
func onNodes(nodes ...string) func(*world) {
	return func(w *world) {
		for i, node := range nodes {
			pod := w.pods[w.members[i].Name]
			pod.Spec.NodeName = node
			pod.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
		}
	}
}

// withNodes adds Ready, schedulable nodes; mods change each by name.
func withNodes(names ...string) func(*world) {
	return func(w *world) {
		for _, n := range names {
			w.nodes = append(w.nodes, corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelHostname: n}},
				Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
			})
		}
	}
}

func node(name string, mod func(*corev1.Node)) func(*world) {
	return func(w *world) {
		for i := range w.nodes {
			if w.nodes[i].Name == name {
				mod(&w.nodes[i])
				return
			}
		}
		panic("no node " + name)
	}
}

// crowded is a healthy 3-member world, all on node a, with nodes b and c
// empty and fitting.
func crowded(mods ...func(*world)) *world {
	return healthyWorld(3, append([]func(*world){onNodes("a", "a", "a"), withNodes("a", "b", "c")}, mods...)...)
}

func apartSays(reason, text string) func(*testing.T, plan) {
	return func(t *testing.T, p plan) {
		t.Helper()
		if p.apart == nil || p.apart.reason != reason || !strings.Contains(p.apart.message, text) {
			t.Errorf("apart finding %+v, want %s saying %q", p.apart, reason, text)
		}
	}
}

func movedBefore(member string, sharing int32, fits ...string) func(*world) {
	return func(w *world) {
		w.cluster.Status.LastMoveApart = &v1alpha2.MoveApart{Member: member, Node: "a", Sharing: sharing, FittingNodes: fits, Time: metav1.NewTime(t0.Add(-30 * time.Minute))}
	}
}

func TestMoveApartActs(t *testing.T) {
	runRows(t, []row{
		{name: "three on one node, two free: the newest follower moves first", w: crowded(), kind: moveApart, member: "m2",
			progress: "Moving member m2 off node a, which it shares with m0, m1",
			check: func(t *testing.T, p plan) {
				mv := p.change.move
				if mv == nil || mv.Member != "m2" || mv.Node != "a" || mv.Sharing != 3 || !slices.Equal(mv.FittingNodes, []string{"b", "c"}) || !mv.Time.Equal(ptr.To(metav1.NewTime(t0))) {
					t.Errorf("record %+v", mv)
				}
			}},
		{name: "the leader is not the one moved", w: crowded(leaderIs("m2")), kind: moveApart, member: "m1"},
		{name: "two share a node, the third has its own", w: healthyWorld(3, onNodes("a", "b", "a"), withNodes("a", "b", "c")), kind: moveApart, member: "m2"},
		{name: "the first move helped: the next goes on with the node left", w: crowded(onNodes("a", "a", "b"), movedBefore("m9", 3, "b", "c")),
			kind: moveApart, member: "m1"},
		{name: "the record names a member still running (stopped before the deletion): the move is made", w: crowded(movedBefore("m2", 3, "b", "c")),
			kind: moveApart, member: "m2"},
		{name: "a node that did not fit then fits now", w: crowded(withNodes("d"), movedBefore("m9", 3, "b", "c")), kind: moveApart, member: "m2"},
		{name: "a tolerated taint and a matched selector fit", w: crowded(
			node("b", func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "etcd", Effect: corev1.TaintEffectNoSchedule}}
				n.Labels["pool"] = "etcd"
			}),
			func(w *world) {
				for _, p := range w.pods {
					p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "etcd", Effect: corev1.TaintEffectNoSchedule}}
					p.Spec.NodeSelector = map[string]string{"pool": "etcd"}
				}
			}), kind: moveApart, member: "m2",
			check: func(t *testing.T, p plan) {
				if got := p.change.move.FittingNodes; !slices.Equal(got, []string{"b"}) {
					t.Errorf("fitting nodes %v, want [b]", got)
				}
			}},
		{name: "a custom delay that passed", w: crowded(func(w *world) {
			w.cluster.Annotations = map[string]string{AnnotationMoveApartAfter: "30s"}
			for _, p := range w.pods {
				p.Status.Conditions[len(p.Status.Conditions)-1].LastTransitionTime = metav1.NewTime(t0.Add(-time.Minute))
			}
		}), kind: moveApart, member: "m2"},
	})
}

// The cases where no member may move: as many as those where one does.
func TestMoveApartRefuses(t *testing.T) {
	runRows(t, []row{
		{name: "each member on its own node", w: healthyWorld(3, onNodes("a", "b", "c"), withNodes("a", "b", "c", "d")),
			check: func(t *testing.T, p plan) {
				if p.apart != nil {
					t.Errorf("finding %+v on a spread cluster", p.apart)
				}
			}},
		{name: "no other node", w: healthyWorld(3, onNodes("a", "a", "a"), withNodes("a")), check: apartSays(conditions.ReasonNoNodeFits, "Members m0, m1, m2 share node a")},
		{name: "the free nodes hold members", w: healthyWorld(3, onNodes("a", "a", "b"), withNodes("a", "b")), check: apartSays(conditions.ReasonNoNodeFits, "no other node fits")},
		{name: "the free nodes are cordoned, not Ready, going or tainted", w: crowded(
			node("b", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			node("c", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }),
			withNodes("d", "e"),
			node("d", func(n *corev1.Node) { n.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }),
			node("e", func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
			}),
		), check: apartSays(conditions.ReasonNoNodeFits, "")},
		{name: "the free nodes miss the node selector or the required affinity", w: crowded(func(w *world) {
			for _, p := range w.pods {
				p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "a"}
			}
		}), check: apartSays(conditions.ReasonNoNodeFits, "")},
		{name: "sharing for less than the delay", w: crowded(func(w *world) {
			for _, p := range w.pods {
				p.Status.Conditions[len(p.Status.Conditions)-1].LastTransitionTime = metav1.NewTime(t0.Add(-9 * time.Minute))
			}
		}), check: func(t *testing.T, p plan) {
			apartSays(conditions.ReasonSharingNode, "once they have shared it for 10m0s")(t, p)
			if p.requeue != time.Minute {
				t.Errorf("requeue %s, want the minute left", p.requeue)
			}
		}},
		{name: "never", w: crowded(func(w *world) { w.cluster.Annotations = map[string]string{AnnotationMoveApartAfter: "never"} }),
			check: apartSays(conditions.ReasonSharingNode, "=never keeps them there")},
		{name: "an annotation that does not parse", w: crowded(func(w *world) { w.cluster.Annotations = map[string]string{AnnotationMoveApartAfter: "soon"} }),
			check: apartSays(conditions.ReasonSharingNode, `"soon" is neither a duration`)},
		{name: "the user's own pod anti-affinity", w: crowded(func(w *world) {
			w.cluster.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
			w.cluster.Status.Observed = manifest.Observe(&w.cluster.Spec)
			for _, m := range w.members {
				rolledOut(m.Name)(w)
			}
		}), check: apartSays(conditions.ReasonSharingNode, "leaves placement to it")},
		{name: "the last move did not help and no new node fits", w: crowded(movedBefore("m9", 3, "b", "c")),
			check: apartSays(conditions.ReasonMoveDidNotHelp, "no member moves until the nodes that fit (b, c) change")},
		{name: "the last move did not help, and a node that fitted went", w: crowded(movedBefore("m9", 3, "b", "c", "d")),
			check: apartSays(conditions.ReasonMoveDidNotHelp, "")},
		{name: "a member unhealthy by etcd", w: crowded(cutOff("m1"))},
		// The earlier stages come first: the replacement, the promotion,
		// the roll-out.
		{name: "a member leaving", w: crowded(deletedMember("m1")), kind: createJoiner},
		{name: "a learner joining", w: crowded(learner("m3", 1000)), kind: promote, member: "m3"},
		{name: "a roll-out pending", w: crowded(wantVersion("3.6.17")), kind: restart, member: "m1"},
		{name: "a member that became Ready a moment ago", w: crowded(func(w *world) {
			member(w, "m0").Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-time.Second))
		}), check: apartSays(conditions.ReasonSharingNode, "waiting for member m0 to settle")},
		{name: "etcd not answering", w: crowded(func(w *world) { w.etcd.list = nil; w.etcd.err = errUnreachable })},
		{name: "the nodes could not be read", w: crowded(func(w *world) { w.nodesErr = errUnreachable }), check: apartSays(conditions.ReasonSharingNode, "could not be read")},
		{name: "a defragmentation holds the lock", w: crowded(func(w *world) {
			w.cluster.Status.MaintenanceLock = &v1alpha2.MaintenanceLock{Holder: "d", Member: "m0", RequestedAt: metav1.NewTime(t0), ExpiresAt: metav1.NewTime(t0.Add(time.Minute))}
		})},
	})
}

var errUnreachable = errString("connection refused")

type errString string

func (e errString) Error() string { return string(e) }

// The condition: absent until members share a node, then saying why they
// stay or move, and True again once each runs alone.
func TestMembersApartCondition(t *testing.T) {
	cond := func(w *world) *metav1.Condition {
		setMembersApart(w, decide(w))
		return conditions.Get(w.cluster.Status.Conditions, conditions.MembersApart)
	}
	if c := cond(healthyWorld(3, onNodes("a", "b", "c"), withNodes("a", "b", "c"))); c != nil {
		t.Errorf("a cluster that never shared a node has %+v", c)
	}
	w := healthyWorld(3, onNodes("a", "a", "a"), withNodes("a"))
	if c := cond(w); c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonNoNodeFits {
		t.Errorf("crowded without a node: %+v", c)
	}
	moving := crowded(movedBefore("m2", 3, "b", "c"), deletedMember("m2"))
	if c := cond(moving); c == nil || c.Reason != conditions.ReasonMovingApart || !strings.Contains(c.Message, "member m2 is moving off node a") {
		t.Errorf("during a move: %+v", c)
	}
	// The replacement runs on a node of its own, but the member it
	// replaces still serves beside another until it has left.
	replaced := crowded(onNodes("a", "b", "a"), movedBefore("m2", 3, "b", "c"), deletedMember("m2"), func(w *world) {
		addMember(w, "m3", t0.Add(time.Hour))
		w.pods["m3"].Spec.NodeName = "c"
	})
	if c := cond(replaced); c == nil || c.Reason != conditions.ReasonMovingApart {
		t.Errorf("while the moved member still serves: %+v", c)
	}
	onNodes("a", "b", "c")(w)
	if c := cond(w); c == nil || c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonApart {
		t.Errorf("apart again: %+v", c)
	}
}
