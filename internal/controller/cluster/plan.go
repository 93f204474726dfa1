package cluster

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// The planner: a pure function from the world (observe.go) to at most one
// change and the reasons for everything it did not do. It never calls the
// API server or etcd; act.go carries the change out, and status.go sets the
// conditions from the plan and the outcome, in one place.
//
// Priority, highest first: decide runs these stages in this order (one
// line per stage, its file in brackets). The first stage that makes a
// change ends the plan; a stage that is refused (to protect quorum) or
// waits records why and lets the later stages try, unless it says the
// pass must stop.
//
//  1. holds: cert-manager missing before the cluster formed, etcd answering
//     as another cluster: nothing is changed (plan.go).
//  2. latchFirstTarget: the token and the first target (target.go).
//  3. latchChangedTarget: a changed spec adopted at a boundary (target
//     reached, or its deadline passed) (target.go).
//  4. recover: a survivor's mark no recovery backs taken off; a recovery
//     from quorum loss under way, or asked for by annotation; it holds the
//     later stages while the discarded members stop, the survivor restarts
//     alone and the discarded members go (recover.go).
//  5. bootstrap: seed member, its first start, the cluster ID (or its
//     recovery from the members when status lost it) (bootstrap.go).
//  6. etcdReachable: no membership change without a fresh member list
//     (plan.go).
//  7. recordJoined: the membership of a member etcd already added (join.go).
//  8. removeLeaving: members leaving; a deleted member waits for its
//     replacement while it still serves (remove.go).
//  9. removeStrays: etcd members nobody accounts for (remove.go).
// 10. retireLost: lost members replaced (repair.go).
// 11. promoteLearner: the learner promoted once it caught up (join.go).
// 12. addPending: the learner add of a created member (join.go).
// 13. retireStuckJoiners: members that will never join (repair.go).
// 14. scale: wake a dormant member or create one when short; pause or
//     remove one when over (scale.go).
// 15. cancelStaleDowngrade: a downgrade etcd still runs for an older
//     target cancelled (roll.go).
// 16. rollOut: one member at a time onto the target, the leader last
//     (roll.go).
// 17. enableAuth: authentication once the target is reached (auth.go).
// 18. moveApart: a member that shares a node with another moved off it,
//     replaced like any member, once nothing else is to be done and a
//     node of its own fits it (spread.go).
//
// Then, whatever was chosen, heldBack: a disruptive change waits while a
// defragmentation holds the maintenance lock (maintenance_lock.go).
//
// One pass carries out one change, with two exceptions that mayFollow
// states: a latch may be followed by the first step towards its target,
// and a removal by the next removal of the same scale-down.

// changeKind names the one change a plan makes.
type changeKind int

const (
	// latchStatus replaces the cluster's status with change.status: the
	// target, the token, the cluster ID, a cluster started over.
	latchStatus changeKind = iota + 1
	createSeed
	completeSeed
	createJoiner
	addLearner
	recordJoined
	promote
	// removeFromEtcd removes a leaving member from etcd (the leader hands
	// over first) and releases it.
	removeFromEtcd
	// release drops a leaving member's finalizer: etcd does not list it.
	release
	removeStray
	// deleteMember deletes an EtcdMember the operator gives up; it then
	// leaves etcd through removeFromEtcd.
	deleteMember
	setDormant
	wake
	restart
	// completeRollOut records the end of status.lastRollOut.
	completeRollOut
	enableDowngrade
	cancelDowngrade
	enableAuth
	// forceNewCluster marks a recovery's survivor and restarts its Pod,
	// which then runs etcd with --force-new-cluster.
	forceNewCluster
	// clearForce takes the survivor's mark off its member and its Pod.
	clearForce
	// fence stops a member a consented recovery discards (dormant: no
	// Pod), before the survivor is forced; unfence wakes it when the
	// recovery stops.
	fence
	unfence
	// discard deletes a member a recovery discarded, keeping its claim
	// (released and labelled) unless the plan deletes it.
	discard
	// takeSnapshot creates the EtcdSnapshot a changed spec waits for
	// (spec.snapshotBefore).
	takeSnapshot
	// moveApart records a move in status.lastMoveApart and deletes the
	// member, which a replacement then takes the place of (spread.go).
	moveApart
)

var changeNames = map[changeKind]string{
	latchStatus: "latchStatus", createSeed: "createSeed", completeSeed: "completeSeed", createJoiner: "createJoiner",
	addLearner: "addLearner", recordJoined: "recordJoined", promote: "promote", removeFromEtcd: "removeFromEtcd",
	release: "release", removeStray: "removeStray", deleteMember: "deleteMember", setDormant: "setDormant", wake: "wake",
	restart: "restart", completeRollOut: "completeRollOut", enableDowngrade: "enableDowngrade", cancelDowngrade: "cancelDowngrade", enableAuth: "enableAuth",
	forceNewCluster: "forceNewCluster", clearForce: "clearForce", fence: "fence", unfence: "unfence", discard: "discard",
	takeSnapshot: "takeSnapshot", moveApart: "moveApart",
}

func (k changeKind) String() string {
	if name, ok := changeNames[k]; ok {
		return name
	}
	return fmt.Sprintf("change(%d)", int(k))
}

// change is the one change of a plan, with what it needs to be carried out.
type change struct {
	kind   changeKind
	member *v1alpha2.EtcdMember
	// etcdID is the etcd member a removal or promotion is about.
	etcdID uint64
	// handOver is the voter the leader hands its leadership to first.
	handOver *v1alpha2.EtcdMember
	// initial is the initialCluster recorded on a member.
	initial string
	// version is a downgrade's target version.
	version string
	// status is the cluster status a latch writes.
	status *v1alpha2.EtcdClusterStatus
	// reason and message describe the change in its Event (and, for a
	// deletion, why the member goes).
	reason, message string
	// keepClaim: a discarded member's claim is released and kept.
	keepClaim bool
	// snapshot is the EtcdSnapshot takeSnapshot creates.
	snapshot *v1alpha2.EtcdSnapshot
	// move is the record moveApart writes before the deletion.
	move *v1alpha2.MoveApart
	// thenRemove: a deletion to scale down goes on, in the same pass,
	// with the member's removal from etcd (etcdID, handOver). The deletion
	// is recorded first: were the operator to stop between the two, the
	// next pass finds a leaving member and removes it (removeLeaving).
	thenRemove bool
}

// plan is what the planner decided.
type plan struct {
	change *change
	// progress is what the operator works on (Progressing=True), or waits
	// for; empty when the pass brings nothing new.
	progress finding
	// hold is why nothing can be changed at all.
	hold *finding
	// refused are the changes held back to protect quorum, with the member
	// each is about (if any).
	refused []refusal
	// stuck says why a roll-out stopped (Degraded=RollOutStuck).
	stuck *refusal
	// versionRefused says why the asked version cannot be reached.
	versionRefused string
	// snapshotBeforeFailed says why a changed spec waits for a snapshot
	// that failed, or cannot be taken (snapshot_before.go).
	snapshotBeforeFailed string
	// requeue is a real timer the plan waits on (etcd's own timers, a
	// settle period); zero when a watch event brings the next pass.
	requeue time.Duration
	// recovery is the status.recovery the pass writes, when recoverySet
	// (nil clears it); written only when the change succeeded.
	recovery    *v1alpha2.RecoveryStatus
	recoverySet bool
	// apart is why members that share a node are, or are not, moved apart
	// (the MembersApart condition), when the last stage looked.
	apart *finding
}

// refusal is a change held back, for Degraded and a Warning Event.
type refusal struct {
	message string
	about   client.Object
}

// Requeue timers of the planner; each waits for something no watch reports.
const (
	// etcdRetry: etcd refuses a membership change until a voter joined or
	// changed ~5 s ago (its strict reconfiguration check), and a learner
	// catches up on its own; polling them briefly is the only way to know.
	etcdRetry = time.Second
	// unreachableRetry: etcd did not answer; members' readiness events
	// usually bring the next pass sooner.
	unreachableRetry = 5 * time.Second
	// versionPoll: etcd changes its cluster version by itself, a moment
	// after the members.
	versionPoll = 2 * time.Second
)

// planner builds a plan from a world.
type planner struct {
	w *world
	p plan
}

// stage is one stage of the plan; it returns true when the plan is complete
// (a change was chosen, or the pass must stop here).
type stage func(*planner) bool

// decide is the planner: the stages in priority order.
func decide(w *world) plan {
	pl := &planner{w: w}
	for _, s := range []stage{
		(*planner).holds,
		(*planner).latchFirstTarget,
		(*planner).latchChangedTarget,
		(*planner).recover,
		(*planner).bootstrap,
		(*planner).etcdReachable,
		(*planner).recordJoined,
		(*planner).removeLeaving,
		(*planner).removeStrays,
		(*planner).retireLost,
		(*planner).promoteLearner,
		(*planner).addPending,
		(*planner).retireStuckJoiners,
		(*planner).scale,
		(*planner).cancelStaleDowngrade,
		(*planner).rollOut,
		(*planner).enableAuth,
		(*planner).moveApart,
	} {
		if s(pl) {
			break
		}
	}
	// A member being defragmented holds every disruptive change back.
	pl.heldBack()
	return pl.p
}

// maxRemovalsPerPass bounds the removals one pass makes to scale down.
const maxRemovalsPerPass = 4

// mayFollow says whether next may be carried out in the same pass as
// prev, which just succeeded: the chaining rules of a pass (controller.go's
// goOn applies them, deciding again on the same view). Only steps that
// need no second look qualify: after a latch, the seed of a new cluster
// or a scale-down's first removal; after a removal etcd confirmed that
// did not move the leadership (removed), the next removal of the same
// scale-down. Anything else waits for the next pass.
func mayFollow(prev *change, removed bool, next *change) bool {
	if prev == nil || next == nil {
		return false
	}
	removal := next.kind == deleteMember && next.thenRemove
	switch {
	case prev.kind == latchStatus && prev.reason == conditions.ReasonSpecChanged:
		return removal
	case prev.kind == latchStatus && prev.reason == conditions.ReasonInitialSnapshot:
		return next.kind == createSeed
	case prev.kind != latchStatus && removed:
		return removal
	}
	return false
}

// choose chooses a change and completes the plan (r.act carries it out).
func (pl *planner) choose(c *change) bool {
	pl.p.change = c
	return true
}

// working records what the operator works on.
func (pl *planner) working(reason, format string, args ...any) {
	pl.p.progress = finding{reason, fmt.Sprintf(format, args...)}
}

// wait records what the pass waits for and completes the plan, with a timer
// when nothing watched will bring the next pass.
func (pl *planner) wait(after time.Duration, reason, format string, args ...any) bool {
	pl.working(reason, format, args...)
	pl.p.requeue = after
	return true
}

// refuse records a change held back to protect quorum; the later stages
// still try, so a refused removal never holds the repair of another member.
func (pl *planner) refuse(about client.Object, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	pl.p.refused = append(pl.p.refused, refusal{message: msg, about: about})
	pl.working(conditions.ReasonRefused, "Holding membership changes: %s", msg)
}

// holds stops every change while cert-manager, which a new cluster's TLS
// needs, is missing, or while etcd answers as another cluster.
func (pl *planner) holds() bool {
	w := pl.w
	if msg := w.features.certManagerMissing; msg != "" && w.cluster.Status.ClusterID == "" {
		pl.p.hold = &finding{conditions.ReasonCertManagerNotInstalled, msg}
		pl.p.requeue = certManagerPoll
		return true
	}
	if l := w.etcd.list; l != nil && w.cluster.Status.ClusterID != "" && etcd.FormatID(l.ClusterID) != w.cluster.Status.ClusterID {
		pl.p.hold = &finding{conditions.ReasonClusterIDMismatch, fmt.Sprintf(
			"etcd answers as cluster %s, but this EtcdCluster latched cluster %s: no membership change is made. "+
				"If the latched ID is wrong (its status was edited or restored), remove status.clusterID and the operator recovers it from the members; "+
				"otherwise the members run a cluster that is not this one", etcd.FormatID(l.ClusterID), w.cluster.Status.ClusterID)}
		return true
	}
	return false
}

// etcdReachable stops the membership stages when etcd was asked and could
// not say who its members are. With nobody to ask (paused, or no Pod yet)
// they see no membership and only scaling acts.
func (pl *planner) etcdReachable() bool {
	w := pl.w
	if !w.etcd.asked || w.etcd.list != nil {
		return false
	}
	pl.working(conditions.ReasonClusterUnreachable, "Cannot read etcd's membership: %v", w.etcd.err)
	if len(w.running()) < w.desired() && len(w.dormant()) > 0 {
		// Waking a dormant member needs nobody's answer.
		return false
	}
	pl.p.requeue = unreachableBackOff(w)
	return true
}

// unreachableBackOff is when to ask etcd again after no member answered:
// unreachableRetry at first, then half as long as the cluster has been
// unavailable, at most healthPoll. Each try holds a worker for the status
// calls' timeout; a hundred clusters cut off from the operator, tried every
// 5 s, kept every worker busy and the healthy clusters' changes waiting
// (the scale bench at 1,000 clusters, one in ten silent). A member that
// answers again usually shows first in its Pod's readiness, which is
// watched. A member that answers with an error is asked at the usual pace.
func unreachableBackOff(w *world) time.Duration {
	c := conditions.Get(w.original.Status.Conditions, conditions.Available)
	if !etcd.Silent(w.etcd.err) || c == nil || c.Status != metav1.ConditionFalse {
		return unreachableRetry
	}
	return min(max(unreachableRetry, w.now.Sub(c.LastTransitionTime.Time)/2), healthPoll)
}
