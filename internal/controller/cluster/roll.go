package cluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// settle is how long a restarted member must have been Ready before the
// next one restarts: etcd's own health interval, so the member is connected
// to its peers again and counts in etcd's checks.
const settle = 5 * time.Second

// The roll-out: when the latched target differs from what running members
// were made from (version, resources, options, scheduling, metadata,
// storage size), members are brought to it one at a time. A member keeps its
// name, claim and etcd identity: its spec is re-templated and its Pod
// evicted (through the PodDisruptionBudget) and made again on the same
// claim; a memory-backed member, whose data would go with its Pod, is
// replaced through the learner path instead. Followers go first, the leader
// last after handing its leadership over; each restart only when the others
// stay a healthy quorum by etcd's fresh report, the next only once every
// member is healthy again and settled. Everything is derived from the
// members, their Pods and etcd, so an operator that dies at any point
// resumes without restarting members already done.

// cancelStaleDowngrade cancels a downgrade etcd still runs for a target
// that is no longer one minor down (the spec went back up half-way): etcd
// would otherwise keep the lower cluster version for good.
func (pl *planner) cancelStaleDowngrade() bool {
	w := pl.w
	dt := w.etcd.downgradeTarget
	if dt == "" || w.etcd.list == nil || w.cluster.Status.Observed == nil {
		return false
	}
	if minorOf(dt) == minorOf(w.cluster.Status.Observed.Version) {
		return false
	}
	pl.working(conditions.ReasonRollingOut, "Cancelling etcd's downgrade to %s: the target is now %s", minorOf(dt), w.cluster.Status.Observed.Version)
	return pl.choose(&change{kind: cancelDowngrade, version: dt})
}

// rollOut makes one roll-out step, when the membership is otherwise settled.
func (pl *planner) rollOut() bool {
	w := pl.w
	if !readyToRoll(w) {
		return false
	}
	outdated := outdated(w)
	if len(outdated) == 0 {
		return pl.finishRoll()
	}
	if pl.versionGate() {
		return true
	}
	// A member that is down and still outdated is the one to restart
	// next (it costs nothing that is not lost already, and a restart may be
	// what brings it back); any other unhealthy member holds the roll.
	m := downAndOutdated(w)
	if m == nil && pl.waitSettled() {
		return true
	}
	if w.secretProblem != "" {
		// A restarted member could not start again.
		pl.working(conditions.ReasonSecretMissing, "The roll-out waits: %s", w.secretProblem)
		return true
	}
	if m == nil {
		m = nextToRoll(w, outdated)
	}
	if w.handoverPending(m) && w.runsTarget(m) {
		pl.working(conditions.ReasonRollingOut, "TLS hand-over: restarting %s %s", m.Name, handoverStep(nextStageOf(w, m), w.handover.final))
	} else {
		pl.working(conditions.ReasonRollingOut, "%d of %d members up to date; rolling %s", w.desired()-len(outdated), w.desired(), m.Name)
	}
	if m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory {
		// Its data lives in the Pod: replace it; a new member joins from the
		// target as a learner.
		if d := quorum.Remove(w.voters(), m.Name); !d.OK {
			pl.refuse(m, "rolling %s waits: %s", m.Name, d.Reason)
			return true
		}
		return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonRollingOut,
			message: fmt.Sprintf("Replacing memory-backed member %s to roll out the new target", m.Name)})
	}
	if d := quorum.Restart(w.voters(), m.Name); !d.OK {
		pl.refuse(m, "rolling %s waits: %s", m.Name, d.Reason)
		return true
	}
	c := &change{kind: restart, member: m}
	if w.leaderMember() == m {
		c.handOver = transferee(w, m)
	}
	return pl.choose(c)
}

// downAndOutdated is the only member that is not healthy, when it is also
// not up to date; nil otherwise.
func downAndOutdated(w *world) *v1alpha2.EtcdMember {
	var down *v1alpha2.EtcdMember
	for _, m := range w.running() {
		if w.healthy(m) && w.isVoter(m) {
			continue
		}
		if down != nil {
			return nil
		}
		down = m
	}
	switch {
	case down == nil || w.upToDate(down) || !w.isVoter(down):
		return nil
	case w.pods[down.Name] == nil:
		// No Pod: one is being made, from the member's spec as it is.
		return nil
	case down.Annotations[manifest.AnnotationSnapshotCount] != "":
		// Restarted to take a snapshot before its next minor: that
		// restart must come back (and snapshot) first.
		return nil
	}
	return down
}

// readyToRoll: the cluster formed, has exactly its members, none leaving,
// pending or learning: scaling and repair come first.
func readyToRoll(w *world) bool {
	return w.etcd.list != nil && w.cluster.Status.ClusterID != "" && w.cluster.Status.Observed != nil &&
		len(w.running()) == w.desired() && len(w.leaving()) == 0 && len(w.pending()) == 0 && w.learner() == nil
}

// finishRoll waits for the last member restarted, records the roll-out's
// end, and waits for etcd's cluster version to reach the target's minor.
// With no roll-out in flight and the version reached there is nothing to
// finish: a member unhealthy then is the repair stages' to report, not a
// roll-out waiting for it.
func (pl *planner) finishRoll() bool {
	w := pl.w
	lr := w.cluster.Status.LastRollOut
	inFlight := lr != nil && lr.CompletionTime == nil
	target, err := version.Parse(w.cluster.Status.Observed.Version)
	versionReached := err != nil || w.clusterVersion() == target.MinorString()
	if !inFlight && versionReached {
		return false
	}
	if pl.waitSettled() {
		return true
	}
	if inFlight {
		return pl.choose(&change{kind: completeRollOut, reason: conditions.ReasonRollingOut,
			message: fmt.Sprintf("Roll-out complete: %d members restarted (%s)", len(lr.Restarted), lr.Message)})
	}
	// etcd raises its cluster version by itself a moment after the last
	// member; it is not watched.
	return pl.wait(versionPoll, conditions.ReasonRollingOut, "Every member runs %s; waiting for etcd's cluster version to reach %s",
		target, target.MinorString())
}

// outdated lists the running members whose spec is older than the target,
// or whose Pod was made from an older spec than theirs, or whose claim is
// still growing, or that have a TLS hand-over step to take now (one that
// waits for the others to catch up is not outdated yet).
func outdated(w *world) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, m := range w.running() {
		if !w.upToDate(m) && (!w.runsTarget(m) || !w.tlsWaits(m)) {
			out = append(out, m)
		}
	}
	return out
}

// podOutdated reports whether the member's Pod was not made from the
// member's spec as it is: another template hash, or none (a Pod from before
// hashes, which a restart brings up to date), or other TLS material.
func podOutdated(w *world, m *v1alpha2.EtcdMember) bool {
	pod := w.pods[m.Name]
	return pod != nil && (pod.Annotations[manifest.AnnotationTemplateHash] != manifest.TemplateHash(m) || !manifest.PodTLSCurrent(pod, m))
}

// waitSettled holds the roll while a member is not healthy by etcd's fresh
// report, or became Ready less than the settle period ago. A restarted
// member that does not come back within the progress deadline stops the
// roll: Degraded names it with its last log lines.
func (pl *planner) waitSettled() bool {
	w := pl.w
	for _, m := range w.running() {
		if ok, why := w.health(m); !ok || !w.isVoter(m) {
			if overdue(w) {
				pl.p.stuck = &refusal{message: fmt.Sprintf("the roll-out stopped: member %s is not ready on %s: %s", m.Name, m.Spec.Version, lastWords(w, m)), about: m}
			}
			if why == "" {
				why = "not a voter"
			}
			pl.working(conditions.ReasonRollingOut, "Waiting for member %s to be healthy before rolling the next (%s)", m.Name, why)
			// Pod and member changes bring the next pass; etcd's own
			// recovery (a leader again) is not watched.
			pl.p.requeue = unreachableRetry
			return true
		}
		c := conditions.Get(m.Status.Conditions, conditions.Ready)
		if c == nil {
			continue
		}
		if since := w.now.Sub(c.LastTransitionTime.Time); since < settle {
			// Readiness does not change again to wake us: wait it out.
			return pl.wait(settle-since, conditions.ReasonRollingOut, "Letting member %s settle before rolling the next", m.Name)
		}
	}
	return false
}

// lastWords is what the member's etcd said last before it stopped, or why
// its container does not run.
func lastWords(w *world, m *v1alpha2.EtcdMember) string {
	pod := w.pods[m.Name]
	if pod == nil {
		return "its Pod is gone"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; t != nil && t.Message != "" {
			return lastLines(t.Message, 3)
		}
		if t := cs.State.Terminated; t != nil && t.Message != "" {
			return lastLines(t.Message, 3)
		}
		if wt := cs.State.Waiting; wt != nil {
			return wt.Reason + ": " + wt.Message
		}
	}
	if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil {
		return c.Message
	}
	return "no reason reported"
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// nextToRoll picks followers first (oldest first) and the leader last.
func nextToRoll(w *world, outdated []*v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	leader := w.leaderMember()
	ordered := newest(outdated)
	for i := len(ordered) - 1; i >= 0; i-- {
		if ordered[i] != leader {
			return ordered[i]
		}
	}
	return ordered[0]
}

// versionGate refuses a version change etcd's upgrade rules do not allow,
// before any member is touched, and starts etcd's downgrade for a minor
// downgrade. It completes the plan when it refused, acted or waits.
func (pl *planner) versionGate() bool {
	w := pl.w
	target, err := version.Parse(w.cluster.Status.Observed.Version)
	if err != nil {
		pl.p.versionRefused = fmt.Sprintf("version %s cannot be parsed: %v", w.cluster.Status.Observed.Version, err)
		return true
	}
	var running []version.Version
	for _, m := range w.running() {
		v := m.Status.Version
		if v == "" {
			v = m.Spec.Version
		}
		if pv, err := version.Parse(v); err == nil {
			running = append(running, pv)
		}
	}
	cluster, downgrading := w.etcd.clusterVersion, w.etcd.downgradeTarget != ""
	plan := version.Decide(running, cluster, target)
	switch {
	case plan.Refused != "":
		pl.p.versionRefused = fmt.Sprintf("version %s refused: %s", target, plan.Refused)
		return true
	case plan.Kind == version.MinorDown && !downgrading:
		pl.working(conditions.ReasonRollingOut, "Enabling etcd's downgrade to %s", target.MinorString())
		return pl.choose(&change{kind: enableDowngrade, version: target.String()})
	case plan.Kind == version.MinorDown && cluster != target.MinorString():
		// etcd lowers its cluster version a few seconds after the
		// downgrade is enabled, and only while every member answers: a
		// member restarted on the older minor before that cannot join (the
		// cluster version is newer than it), and with it down etcd never
		// lowers the version.
		return pl.wait(versionPoll, conditions.ReasonRollingOut, "Waiting for etcd to lower its cluster version from %s to %s before the first member restarts",
			cluster, target.MinorString())
	}
	return false
}
