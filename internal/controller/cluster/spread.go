package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// Moving members apart. Members spread over nodes by a preferred
// anti-affinity (package manifest), which only scores nodes: when nodes
// were missing (a recovery with two nodes down, a drain with nowhere else
// to go), members land beside each other and stay there once the nodes are
// back, one node then carrying the fate of several votes. When such a
// cluster is at its target and healthy by etcd's fresh view, and has been
// for a while, the operator moves one member off the shared node: it
// deletes it, the scale stage adds a replacement (the leaving member still
// serves and votes meanwhile), and the member leaves etcd once the
// replacement is a healthy voter, like any replacement. One move at a
// time: the next waits for the cluster to be at its target and healthy
// again.
//
// The replacement is placed by the scheduler, not by the operator: the
// move is made only when a node fits the member's Pod (Ready, schedulable,
// its taints tolerated, its node selector and required node affinity
// matched) and holds no member of the cluster, and the anti-affinity then
// prefers that node. Were the scheduler to put it beside another member
// anyway (its resources, say), a next move would do the same: a move is
// recorded (status.lastMoveApart) before the member is deleted, and once
// it is done, a cluster whose members share nodes as much as before is not
// moved again until the nodes that fit change.

// AnnotationMoveApartAfter on an EtcdCluster is how long members must have
// shared a node before one is moved: a duration ("10m"), or "never".
const AnnotationMoveApartAfter = manifest.Prefix + "move-apart-after"

// defaultMoveApartAfter: a node that comes back after a while is given
// time to settle, and a short-lived crowding (a drain in progress, a node
// rebooting) moves nothing.
const defaultMoveApartAfter = 10 * time.Minute

// sharedNodes maps each node that runs the Pods of two or more members to
// their names. A leaving member counts while its Pod runs: it still serves
// and votes there.
func sharedNodes(w *world) map[string][]string {
	on := map[string][]string{}
	for _, m := range w.members {
		if m.Spec.Dormant {
			continue
		}
		if pod := w.pods[m.Name]; pod != nil && pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil {
			on[pod.Spec.NodeName] = append(on[pod.Spec.NodeName], m.Name)
		}
	}
	for node, names := range on {
		if len(names) < 2 {
			delete(on, node)
		}
	}
	return on
}

// sharing counts the members that share a node.
func sharing(shared map[string][]string) int {
	n := 0
	for _, names := range shared {
		n += len(names)
	}
	return n
}

// moveApartAfter reads the cluster's delay; ok is false when it never
// moves members, err when the annotation does not parse.
func moveApartAfter(c *v1alpha2.EtcdCluster) (after time.Duration, ok bool, err error) {
	v, set := c.Annotations[AnnotationMoveApartAfter]
	switch {
	case !set:
		return defaultMoveApartAfter, true, nil
	case v == "never":
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false, fmt.Errorf("annotation %s=%q is neither a duration such as 10m nor \"never\"", AnnotationMoveApartAfter, v)
	}
	return d, true, nil
}

// moveApart is the last stage: it moves one member off a shared node when
// nothing else is to be done. It never completes the plan by waiting: its
// finding goes to the MembersApart condition (plan.apart).
func (pl *planner) moveApart() bool {
	w := pl.w
	shared := sharedNodes(w)
	if len(shared) == 0 || w.etcd.list == nil || !targetReached(w) {
		return false
	}
	f, m, node, fits := pl.moveCandidate(shared)
	if m == nil {
		pl.p.apart = f
		return false
	}
	if d := quorum.Remove(w.voters(), m.Name); !d.OK {
		pl.p.apart = &finding{conditions.ReasonSharingNode, fmt.Sprintf("Member %s shares node %s; moving it waits: %s", m.Name, node, d.Reason)}
		return false
	}
	msg := fmt.Sprintf("Moving member %s off node %s, which it shares with %s: a replacement joins first, on a node of its own if the scheduler finds one (%s fit)",
		m.Name, node, strings.Join(slices.DeleteFunc(slices.Clone(shared[node]), func(n string) bool { return n == m.Name }), ", "), strings.Join(fits, ", "))
	pl.working(conditions.ReasonMovingApart, "%s", msg)
	pl.p.apart = &finding{conditions.ReasonMovingApart, msg}
	return pl.choose(&change{kind: moveApart, member: m, reason: conditions.ReasonMovingApart, message: msg, move: &v1alpha2.MoveApart{
		Member: m.Name, Node: node, Sharing: int32(sharing(shared)), FittingNodes: fits, Time: metav1.NewTime(w.now),
	}})
}

// moveCandidate chooses the member to move, its node and the nodes that fit
// it, or says why none moves.
func (pl *planner) moveCandidate(shared map[string][]string) (*finding, *v1alpha2.EtcdMember, string, []string) {
	w := pl.w
	node := mostShared(shared)
	what := fmt.Sprintf("Members %s share node %s", strings.Join(shared[node], ", "), node)
	if a := w.cluster.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		return &finding{conditions.ReasonSharingNode, what + "; spec.affinity sets its own pod anti-affinity, so the operator leaves placement to it"}, nil, "", nil
	}
	after, ok, err := moveApartAfter(w.cluster)
	switch {
	case err != nil:
		return &finding{conditions.ReasonSharingNode, what + "; no member is moved: " + err.Error()}, nil, "", nil
	case !ok:
		return &finding{conditions.ReasonSharingNode, what + "; annotation " + AnnotationMoveApartAfter + "=never keeps them there"}, nil, "", nil
	}
	if w.nodesErr != nil {
		return &finding{conditions.ReasonSharingNode, what + "; the nodes could not be read: " + w.nodesErr.Error()}, nil, "", nil
	}
	m := mover(w, shared[node])
	if m == nil {
		return &finding{conditions.ReasonSharingNode, what}, nil, "", nil
	}
	fits := fittingNodes(w, w.pods[m.Name])
	if len(fits) == 0 {
		return &finding{conditions.ReasonNoNodeFits, what + "; no other node fits a member (Ready, schedulable, taints tolerated, node selector and required node affinity matched) and holds none of this cluster's. A member moves once one does"}, nil, "", nil
	}
	if last := w.cluster.Status.LastMoveApart; moveDidNotHelp(w, last, shared, fits) {
		return &finding{conditions.ReasonMoveDidNotHelp, fmt.Sprintf(
			"%s; moving member %s off node %s at %s left members sharing nodes as before (the scheduler placed its replacement beside another member, for its resources perhaps), "+
				"so no member moves until the nodes that fit (%s) change", what, last.Member, last.Node, last.Time.UTC().Format(time.RFC3339), strings.Join(fits, ", "))}, nil, "", nil
	}
	since := sharedSince(w, shared[node])
	if wait := since.Add(after).Sub(w.now); wait > 0 {
		if pl.p.requeue == 0 || wait < pl.p.requeue {
			pl.p.requeue = wait
		}
		return &finding{conditions.ReasonSharingNode, fmt.Sprintf("%s; one moves to a node of its own (%s fit) once they have shared it for %s (annotation %s)",
			what, strings.Join(fits, ", "), after, AnnotationMoveApartAfter)}, nil, "", nil
	}
	for _, o := range w.running() {
		if c := conditions.Get(o.Status.Conditions, conditions.Ready); c != nil && w.now.Sub(c.LastTransitionTime.Time) < settle {
			if pl.p.requeue == 0 || settle < pl.p.requeue {
				pl.p.requeue = settle
			}
			return &finding{conditions.ReasonSharingNode, what + "; waiting for member " + o.Name + " to settle"}, nil, "", nil
		}
	}
	return nil, m, node, fits
}

// moveDidNotHelp: the last move is done (its member is no longer running),
// members share nodes as much as before it, and no node fits that did not
// then.
func moveDidNotHelp(w *world, last *v1alpha2.MoveApart, shared map[string][]string, fits []string) bool {
	if last == nil || sharing(shared) < int(last.Sharing) {
		return false
	}
	for _, m := range w.running() {
		if m.Name == last.Member {
			// Recorded, but the operator stopped before the member was
			// deleted: that move never happened.
			return false
		}
	}
	return sets.New(last.FittingNodes...).IsSuperset(sets.New(fits...))
}

// mostShared is the node most members share (by name among equals).
func mostShared(shared map[string][]string) string {
	var best string
	for node, names := range shared {
		if best == "" || len(names) > len(shared[best]) || (len(names) == len(shared[best]) && node < best) {
			best = node
		}
	}
	return best
}

// mover chooses who leaves the shared node: not the leader (its move would
// cost an election), the newest of the others.
func mover(w *world, names []string) *v1alpha2.EtcdMember {
	leader := w.leaderMember()
	var pick *v1alpha2.EtcdMember
	for _, m := range w.running() {
		if m == leader || !slices.Contains(names, m.Name) {
			continue
		}
		pick = m // running() keeps the creation order: the last is the newest
	}
	return pick
}

// sharedSince is when the members began to share their node: the latest
// time one of their Pods was scheduled there.
func sharedSince(w *world, names []string) time.Time {
	var since time.Time
	for _, name := range names {
		pod := w.pods[name]
		t := pod.CreationTimestamp.Time
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				t = c.LastTransitionTime.Time
			}
		}
		if t.After(since) {
			since = t
		}
	}
	return since
}

// fittingNodes are the nodes, by name, that hold no Pod of the cluster and
// that a Pod like pod fits, as far as the operator can tell without the
// scheduler: Ready, schedulable, every NoSchedule and NoExecute taint
// tolerated, the node selector and required node affinity matched.
// Resources and the other Pods' affinities are the scheduler's to judge.
func fittingNodes(w *world, pod *corev1.Pod) []string {
	if pod == nil {
		return nil
	}
	taken := map[string]bool{}
	for _, p := range w.pods {
		taken[p.Spec.NodeName] = true
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	var fits []string
	for i := range w.nodes {
		n := &w.nodes[i]
		if taken[n.Name] || n.Spec.Unschedulable || n.DeletionTimestamp != nil || !nodeIsReady(n) {
			continue
		}
		if ok, err := required.Match(n); err != nil || !ok {
			continue
		}
		if _, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false); untolerated {
			continue
		}
		fits = append(fits, n.Name)
	}
	slices.Sort(fits)
	return fits
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readNodes lists the nodes, from the cache, only for a cluster whose
// members share one.
func (r *Reconciler) readNodes(ctx context.Context, w *world) {
	if len(sharedNodes(w)) == 0 {
		return
	}
	list := &corev1.NodeList{}
	if err := r.Client.List(ctx, list); err != nil {
		w.nodesErr = err
		return
	}
	w.nodes = list.Items
}

// moveMemberApart records the move in the status, then deletes the member:
// were the operator to stop between the two, the record names a member
// still running, which moveDidNotHelp ignores, and the next pass decides
// afresh.
func (r *Reconciler) moveMemberApart(ctx context.Context, w *world, c *change) error {
	before := w.cluster.DeepCopy()
	w.cluster.Status.LastMoveApart = c.move
	if err := r.Client.Status().Patch(ctx, w.cluster, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("recording the move of member %s: %w", c.member.Name, err)
	}
	return r.deleteMember(ctx, w, c.member, c.reason, c.message)
}

// setMembersApart sets the MembersApart condition: only on a cluster whose
// members ever shared a node.
func setMembersApart(w *world, p plan) {
	if len(w.running()) == 0 {
		return
	}
	shared := sharedNodes(w)
	had := conditions.Get(w.cluster.Status.Conditions, conditions.MembersApart) != nil
	switch {
	case len(shared) == 0 && had:
		set(w, conditions.MembersApart, true, conditions.ReasonApart, "Every member runs on a node of its own")
	case len(shared) == 0:
	case p.apart != nil:
		set(w, conditions.MembersApart, false, p.apart.reason, p.apart.message)
	default:
		node := mostShared(shared)
		msg := fmt.Sprintf("Members %s share node %s; one is moved once the cluster is at its target and healthy", strings.Join(shared[node], ", "), node)
		if last := w.cluster.Status.LastMoveApart; last != nil && w.memberNamed(last.Member) != nil && deleting(w.memberNamed(last.Member)) {
			set(w, conditions.MembersApart, false, conditions.ReasonMovingApart, fmt.Sprintf("%s; member %s is moving off node %s: it leaves once its replacement is a healthy voter", msg, last.Member, last.Node))
			return
		}
		set(w, conditions.MembersApart, false, conditions.ReasonSharingNode, msg)
	}
}
