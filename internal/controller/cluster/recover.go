package cluster

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Recovery from quorum loss: explicit, consented, never automatic.
//
// A cluster that lost quorum (quorumloss.go says exactly when: the members
// say so, for lossGrace) reports it (Available=False, QuorumLost,
// naming the members that are gone and since when) and does nothing else:
// etcd may come back by itself, and only a person can decide that the
// members that are gone will not. They ask through the annotation
// AnnotationRecover:
//
//   - "dry-run": the planner records in status.recovery the plan it would
//     carry out (phase Planned), and changes nothing else. The survivor is
//     the voter with the highest applied index among the members whose
//     etcd answers in this pass (a member's Status needs no quorum); every
//     other member is discarded, with the last applied index the operator
//     saw from it (status.lastReports keeps those past a restart). The
//     plan has a token, a hash of what it does and when it was made, good
//     until its expiry (tokenValidity).
//   - the token: carried out only if it is the recorded Planned plan's,
//     before its expiry, the plan made again from fresh facts is the same,
//     and quorum is still lost. Any other answer replaces the Planned
//     record, and a plan made again has a new token: a token is spent once.
//
// Carrying it out, each step persisted before the next acts, and each step
// found again from the facts after a crash:
//
//  1. Fencing: the phase is written first; then the discarded members go
//     dormant, one per pass, so their Pods stop and none can serve under
//     the old membership. Until the survivor is marked, the consent taken
//     back (or a leader named again) stops the recovery: the fenced members
//     wake, the phase is Stopped, nothing is discarded.
//  2. ForcingNewCluster: the survivor's EtcdMember is marked (the annotation
//     AnnotationForceNewCluster, holding the token) and its Pod deleted;
//     the member controller makes the new Pod with the mark, which feeds
//     ETCD_FORCE_NEW_CLUSTER, only while this record backs it
//     (manifest.ForceAuthorized). etcd restarts as the only member of the
//     same cluster (same cluster ID, same member ID, all of its data). A
//     mark no record backs is taken off at once (forceUnauthorized).
//  3. Once the survivor leads alone (its own fresh report, and etcd's
//     membership listing it only), the mark comes off the Pod and the
//     member: no later restart of its container forces again. Nothing joins
//     before that.
//  4. RemovingLost: the discarded EtcdMembers are deleted; their claims are
//     kept (released and labelled) unless the plan deletes them; etcd no
//     longer lists them, so their finalizers are released without a call
//     to etcd.
//  5. Regrowing: the normal planner grows the cluster back to its size, one
//     learner at a time; Completed once the target is reached.

// forceMarked is the member carrying the survivor's mark, on itself or on
// its Pod, or nil.
func (w *world) forceMarked() *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if deleting(m) {
			continue
		}
		if m.Annotations[manifest.AnnotationForceNewCluster] != "" {
			return m
		}
		if p := w.pods[m.Name]; p != nil && p.Annotations[manifest.AnnotationForceNewCluster] != "" {
			return m
		}
	}
	return nil
}

// servesAlone reports whether the member leads a cluster of which it is the
// only member, by its own fresh report and etcd's membership.
func servesAlone(w *world, m *v1alpha2.EtcdMember) bool {
	st := w.etcd.status[m.Name]
	if st == nil || st.Leader != st.MemberID || w.etcd.list == nil {
		return false
	}
	l := w.etcd.list.Members
	return len(l) == 1 && l[0].ID == st.MemberID
}

func (w *world) memberNamed(name string) *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// setRecovery records the recovery status the pass writes.
func (pl *planner) setRecovery(rec *v1alpha2.RecoveryStatus) {
	pl.p.recovery, pl.p.recoverySet = rec, true
}

// recover is the planner's recovery stage: it carries on a recovery under
// way, or answers a request in the annotation. It holds every later stage
// while the survivor is being forced and the lost members removed. A
// survivor's mark that no recovery record authorizes is taken off first,
// whoever put it there.
func (pl *planner) recover() bool {
	w := pl.w
	rec := w.cluster.Status.Recovery
	if marked := w.forceMarked(); marked != nil {
		if why := forceUnauthorized(w, marked, rec); why != "" {
			pl.working(conditions.ReasonForceMarkRemoved, "%s", why)
			return pl.choose(&change{kind: clearForce, member: marked, reason: conditions.ReasonForceMarkRemoved, message: why})
		}
		return pl.forcing(marked, rec)
	}
	if rec != nil {
		switch rec.Phase {
		case v1alpha2.RecoveryFencing:
			return pl.fencing(rec)
		case v1alpha2.RecoveryForcingNewCluster:
			if rec.Survivor != nil && w.memberNamed(rec.Survivor.Name) != nil && servesAlone(w, w.memberNamed(rec.Survivor.Name)) {
				// The mark came off before the phase was written.
				return pl.removeDiscarded(withPhase(rec, v1alpha2.RecoveryRemovingLost, ""))
			}
		case v1alpha2.RecoveryRemovingLost:
			return pl.removeDiscarded(rec)
		case v1alpha2.RecoveryRebootstrapping:
			return pl.rebootstrapping(rec)
		case v1alpha2.RecoveryRegrowing:
			pl.regrowing(rec)
			return false
		}
	}
	return pl.answerRequest(rec)
}

// forceUnauthorized says why the survivor's mark on a member (or its Pod)
// is not the operator's own, or "" when a recovery record stands behind
// it: the record names the member as the survivor and the mark holds the
// record's token, and the record is either under way (ForcingNewCluster)
// or fencing with the consent still given (the operator stopped between
// marking the survivor and writing the phase).
func forceUnauthorized(w *world, m *v1alpha2.EtcdMember, rec *v1alpha2.RecoveryStatus) string {
	mark := m.Annotations[manifest.AnnotationForceNewCluster]
	var why string
	switch {
	case rec == nil || rec.Survivor == nil:
		why = "no recovery is under way"
	case rec.Survivor.Name != m.Name:
		why = fmt.Sprintf("the recovery's survivor is %s", rec.Survivor.Name)
	case mark != "" && mark != rec.Token:
		why = fmt.Sprintf("the mark %q is not the recovery plan's token", mark)
	case rec.Phase == v1alpha2.RecoveryForcingNewCluster:
		return ""
	case rec.Phase == v1alpha2.RecoveryFencing && mark != "" && !withdrawn(w, rec):
		return ""
	default:
		why = fmt.Sprintf("the recovery record is %s, not a consented plan", rec.Phase)
	}
	return fmt.Sprintf("Taking the mark %s off member %s: %s. Only the operator marks a recovery's survivor, after consent to its plan",
		manifest.AnnotationForceNewCluster, m.Name, why)
}

// consented reports whether the annotation gives the token of the planned
// record now, before the plan expired.
func consented(w *world, rec *v1alpha2.RecoveryStatus) bool {
	return rec != nil && rec.Phase == v1alpha2.RecoveryPlanned && rec.Token != "" &&
		w.cluster.Annotations[manifest.AnnotationRecover] == rec.Token &&
		rec.ExpiryTime != nil && w.now.Before(rec.ExpiryTime.Time)
}

// answerRequest plans a recovery (dry run), starts a consented one, or
// clears a plan nobody asks for any more.
func (pl *planner) answerRequest(rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	req := w.cluster.Annotations[manifest.AnnotationRecover]
	// A completed recovery stays on record while the annotation still
	// holds its token.
	settled := rec != nil && rec.Phase == v1alpha2.RecoveryCompleted && (req == rec.Token || req == rec.Request)
	switch {
	case req == "":
		// A finished recovery (completed, or stopped before anything was
		// discarded) stays on record; anything else nobody asks for goes.
		if rec != nil && rec.Phase != v1alpha2.RecoveryCompleted && rec.Phase != v1alpha2.RecoveryStopped {
			pl.setRecovery(nil)
		}
		return false
	case w.cluster.Status.ClusterID == "" && restoreFailedSeed(w) == nil:
		pl.setRecovery(&v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryRefused, Request: req, Message: "The cluster never formed: there is nothing to recover"})
		return false
	case !quorumLost(w) && restoreFailedSeed(w) == nil:
		if !settled {
			pl.setRecovery(&v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryNotNeeded, Request: req, Message: notNeededMessage(w, req)})
		}
		return false
	}
	plan := currentPlan(w, rec)
	plan.Request = req
	switch {
	case plan.Phase == v1alpha2.RecoveryRefused:
		pl.setRecovery(plan)
		pl.working(conditions.ReasonRecoveryRefused, "%s", plan.Message)
		return true
	case req != plan.Token || !consented(w, rec):
		if req != manifest.RecoverDryRun {
			plan.Message = fmt.Sprintf("The annotation's token %q is not the current plan's (the plan changed or expired, was never made, "+
				"or its token was already used or answered): review the plan. %s", req, plan.Message)
		}
		pl.setRecovery(plan)
		pl.working(conditions.ReasonRecoveryPlanned, "%s", plan.Message)
		return true
	}
	return pl.startRecovery(plan)
}

// currentPlan is the plan made from this pass's facts: with the planned
// record's time (and so its token) while it is the same plan and has not
// expired, else made now, with a new token.
func currentPlan(w *world, rec *v1alpha2.RecoveryStatus) *v1alpha2.RecoveryStatus {
	if rec != nil && rec.Phase == v1alpha2.RecoveryPlanned && rec.PlanTime != nil && rec.ExpiryTime != nil && w.now.Before(rec.ExpiryTime.Time) {
		if plan := recoveryPlan(w, rec.PlanTime.Time); plan.Token == rec.Token {
			return plan
		}
	}
	return recoveryPlan(w, w.now)
}

// notNeededMessage answers a request on a cluster with a quorum; the token
// it may hold is void from then on (a later plan has another).
func notNeededMessage(w *world, req string) string {
	msg := "etcd has a leader and a quorum (or the cluster is paused, or no member has been leaderless for " + lossGrace(w).String() + "): nothing to recover"
	if req != manifest.RecoverDryRun {
		msg += fmt.Sprintf("; the token %q is void and will never start a recovery", req)
	}
	return msg + ". Remove the annotation " + manifest.AnnotationRecover
}

// startRecovery carries out a consented plan: from a snapshot, every member
// goes first; from a survivor, it is marked and restarted alone.
func (pl *planner) startRecovery(plan *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	plan.StartTime = &metav1.Time{Time: w.now.Truncate(time.Second)}
	// The phase is written before any member is touched: every later step
	// is found again from it, and a plan made again from members half
	// deleted never replaces the one consented to.
	if plan.Snapshot != "" {
		plan.Phase, plan.Message = v1alpha2.RecoveryRemovingLost, "Deleting every member, to rebuild the cluster from "+origin(plan)
		pl.setRecovery(plan)
		return pl.wait(0, conditions.ReasonRecoveringQuorum, "%s", plan.Message)
	}
	plan.Phase = v1alpha2.RecoveryFencing
	plan.Message = fmt.Sprintf("Stopping %s before restarting %s alone; removing the annotation %s now stops the recovery",
		orNone(discardedNames(plan)), plan.Survivor.Name, manifest.AnnotationRecover)
	pl.setRecovery(plan)
	return pl.wait(0, conditions.ReasonRecoveringQuorum, "%s", plan.Message)
}

// withdrawn reports whether the consent to a recovery under way was taken
// back: the annotation no longer holds its token.
func withdrawn(w *world, rec *v1alpha2.RecoveryStatus) bool {
	return w.cluster.Annotations[manifest.AnnotationRecover] != rec.Token
}

// fencing stops the discarded members, one per pass, and once none of
// them has a Pod left that is not going, marks and restarts the survivor.
// Until then the recovery stops if the consent is taken back or a member
// names a leader again: the fenced members are woken, nothing is lost.
func (pl *planner) fencing(rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	if why := stopReason(w, rec); why != "" {
		return pl.stopRecovery(rec, why)
	}
	for _, d := range rec.Discarded {
		m := w.memberNamed(d.Name)
		if m == nil || deleting(m) || m.Spec.Dormant {
			continue
		}
		pl.setRecovery(rec)
		pl.working(conditions.ReasonRecoveringQuorum, "Stopping discarded member %s", m.Name)
		return pl.choose(&change{kind: fence, member: m, message: "plan " + rec.Token})
	}
	for _, d := range rec.Discarded {
		if p := w.pods[d.Name]; p != nil && p.DeletionTimestamp == nil {
			pl.setRecovery(rec)
			return pl.wait(0, conditions.ReasonRecoveringQuorum, "Waiting for the Pod of discarded member %s to stop", d.Name)
		}
	}
	s := w.memberNamed(rec.Survivor.Name)
	if s == nil || deleting(s) {
		return pl.stopRecovery(rec, fmt.Sprintf("the survivor %s is gone", rec.Survivor.Name))
	}
	next := withPhase(rec, v1alpha2.RecoveryForcingNewCluster, fmt.Sprintf("Restarting %s as the only member of the cluster (--force-new-cluster)", s.Name))
	pl.setRecovery(next)
	pl.working(conditions.ReasonRecoveringQuorum, "%s", next.Message)
	return pl.choose(&change{kind: forceNewCluster, member: s, message: rec.Token})
}

// stopReason says why a fencing recovery must stop, or "".
func stopReason(w *world, rec *v1alpha2.RecoveryStatus) string {
	if withdrawn(w, rec) {
		return fmt.Sprintf("the annotation %s no longer holds the plan's token", manifest.AnnotationRecover)
	}
	if ref, _ := w.reference(); ref != nil {
		return fmt.Sprintf("member %s leads in term %d again: the cluster has a quorum", etcd.FormatID(ref.MemberID), ref.RaftTerm)
	}
	return ""
}

// stopRecovery wakes the members the recovery fenced, one per pass, then
// records that it stopped.
func (pl *planner) stopRecovery(rec *v1alpha2.RecoveryStatus, why string) bool {
	w := pl.w
	for _, d := range rec.Discarded {
		if m := w.memberNamed(d.Name); m != nil && !deleting(m) && m.Spec.Dormant && w.desired() > 0 {
			pl.setRecovery(rec)
			pl.working(conditions.ReasonRecoveringQuorum, "Stopping the recovery (%s): waking %s", why, m.Name)
			return pl.choose(&change{kind: unfence, member: m, message: "the recovery stopped: " + why})
		}
	}
	next := withPhase(rec, v1alpha2.RecoveryStopped, fmt.Sprintf("The recovery stopped before the survivor was forced: %s. Nothing was discarded", why))
	pl.setRecovery(next)
	pl.working(conditions.ReasonRecoveryRefused, "%s", next.Message)
	return false
}

// forcing carries the forced restart of the survivor to the point where it
// serves alone, then takes its mark off.
func (pl *planner) forcing(s *v1alpha2.EtcdMember, rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	if rec.Phase == v1alpha2.RecoveryFencing {
		// Fenced and marked, but the operator stopped before the phase
		// was written: it is written now.
		rec = withPhase(rec, v1alpha2.RecoveryForcingNewCluster, fmt.Sprintf("Restarting %s as the only member of the cluster (--force-new-cluster)", s.Name))
	}
	if rec.StartTime == nil {
		rec = rec.DeepCopy()
		rec.StartTime = &metav1.Time{Time: w.now.Truncate(time.Second)}
	}
	pod := w.pods[s.Name]
	switch {
	case servesAlone(w, s) && pod != nil && pod.Annotations[manifest.AnnotationForceNewCluster] != "":
		next := withPhase(rec, v1alpha2.RecoveryRemovingLost, fmt.Sprintf("%s serves alone; deleting the discarded members", s.Name))
		pl.setRecovery(next)
		pl.working(conditions.ReasonRecoveringQuorum, "%s", next.Message)
		return pl.choose(&change{kind: clearForce, member: s})
	case s.Annotations[manifest.AnnotationForceNewCluster] == "":
		// Only the Pod carries the mark (the operator stopped between the
		// two): finish taking it off, whatever etcd says.
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, rec.Message))
		return pl.choose(&change{kind: clearForce, member: s})
	case pod == nil || pod.DeletionTimestamp != nil:
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, fmt.Sprintf("Waiting for the new Pod of %s", s.Name)))
		return pl.wait(0, conditions.ReasonRecoveringQuorum, "Waiting for the new Pod of survivor %s", s.Name)
	case pod.Annotations[manifest.AnnotationForceNewCluster] == "":
		// Its Pod was made before the mark: restart it.
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, rec.Message))
		pl.working(conditions.ReasonRecoveringQuorum, "Restarting survivor %s with --force-new-cluster", s.Name)
		return pl.choose(&change{kind: forceNewCluster, member: s, message: s.Annotations[manifest.AnnotationForceNewCluster]})
	}
	msg := fmt.Sprintf("Waiting for %s to lead a one-member cluster", s.Name)
	if rec.StartTime != nil && w.now.Sub(rec.StartTime.Time) > survivorPatience {
		msg += fmt.Sprintf(" since %s: its Pod or etcd does not come up (see its Events and logs). The discarded members are stopped "+
			"(dormant) with their data; nothing has been deleted yet. Fix what keeps the survivor's Pod from starting, and the recovery goes on",
			rec.StartTime.UTC().Format(time.RFC3339))
	}
	pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, msg))
	return pl.wait(etcdRetry, conditions.ReasonRecoveringQuorum, "%s", msg)
}

// survivorPatience is how long a survivor may take to lead alone before
// the record says what is left and what to do: a Pod start and an etcd
// start, many times over.
const survivorPatience = 5 * time.Minute

// removeDiscarded deletes the discarded members, one per pass, then lets
// the normal planner grow the cluster back.
func (pl *planner) removeDiscarded(rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	if rec.Snapshot != "" {
		return pl.removeEveryMember(rec)
	}
	for _, d := range rec.Discarded {
		m := w.memberNamed(d.Name)
		if m == nil || deleting(m) || (d.MemberID != "" && m.Status.MemberID != "" && m.Status.MemberID != d.MemberID) {
			continue
		}
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryRemovingLost, "Deleting the discarded members"))
		pl.working(conditions.ReasonRecoveringQuorum, "Deleting discarded member %s", m.Name)
		return pl.choose(&change{kind: discard, member: m, reason: conditions.ReasonRecoveringQuorum, keepClaim: keeps(rec, m),
			message: fmt.Sprintf("Deleting member %s, discarded by the recovery from quorum loss (survivor %s)", m.Name, origin(rec))})
	}
	next := withPhase(rec, v1alpha2.RecoveryRegrowing, fmt.Sprintf("Growing back to %d members from %s", w.desired(), origin(rec)))
	pl.setRecovery(next)
	pl.regrowing(next)
	return false
}

// removeEveryMember deletes every member of a cluster rebuilt from a
// snapshot and releases it at once (etcd, without a quorum, cannot let it
// go), one per pass; once none is left it starts the cluster over: no
// cluster ID, a token of its own, and the restore the seed will make.
func (pl *planner) removeEveryMember(rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	pl.setRecovery(withPhase(rec, v1alpha2.RecoveryRemovingLost, ""))
	pl.working(conditions.ReasonRecoveringQuorum, "Deleting every member, to rebuild the cluster from %s", origin(rec))
	for _, m := range w.members {
		if !deleting(m) {
			return pl.choose(&change{kind: discard, member: m, reason: conditions.ReasonRecoveringQuorum, keepClaim: keeps(rec, m),
				message: fmt.Sprintf("Deleting member %s, discarded by the recovery from %s", m.Name, origin(rec))})
		}
	}
	for _, m := range w.members {
		if controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) {
			return pl.choose(&change{kind: release, member: m, message: "discarded by the recovery from " + origin(rec)})
		}
	}
	if len(w.members) > 0 {
		// Gone once the cache says so.
		return true
	}
	next := w.cluster.Status.DeepCopy()
	next.ClusterID, next.ClusterVersion, next.AuthEnabled = "", "", false
	next.ClusterToken = manifest.ClusterToken(w.cluster) + "-" + rec.Token
	deadline := metav1.NewTime(w.now.Add(time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second))
	next.ProgressDeadline = &deadline
	// status.recovery is report's, from the plan, written with the latch.
	pl.setRecovery(withPhase(rec, v1alpha2.RecoveryRebootstrapping, "Bootstrapping the cluster again from "+origin(rec)))
	return pl.choose(&change{kind: latchStatus, status: next, reason: conditions.ReasonRecoveringQuorum,
		message: fmt.Sprintf("Every member is gone; bootstrapping the cluster again from %s", origin(rec))})
}

// keeps reports whether the recovery keeps the member's claim.
func keeps(rec *v1alpha2.RecoveryStatus, m *v1alpha2.EtcdMember) bool {
	return slices.Contains(rec.KeptClaims, manifest.PVCName(m.Name))
}

// rebootstrapping follows a rebuild from a snapshot: the bootstrap stage
// makes the seed, restoring the snapshot, and the cluster regrows once it
// formed. A restore that failed is reported with what to do; naming
// another snapshot (or the same, after fixing what failed) with a new dry
// run plans a rebuild from it, which retires the failed seed first.
func (pl *planner) rebootstrapping(rec *v1alpha2.RecoveryStatus) bool {
	w := pl.w
	if w.cluster.Status.ClusterID != "" {
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryRegrowing, fmt.Sprintf("Growing back to %d members from %s", w.desired(), origin(rec))))
		return false
	}
	seed := restoreFailedSeed(w)
	if seed == nil {
		return false
	}
	if req := w.cluster.Annotations[manifest.AnnotationRecover]; req != rec.Token && req != "" {
		return pl.answerRequest(rec)
	}
	c := conditions.Get(seed.Status.Conditions, conditions.Ready)
	pl.setRecovery(withPhase(rec, v1alpha2.RecoveryRebootstrapping, fmt.Sprintf(
		"The restore of %s into seed member %s failed: %s. To rebuild from another snapshot, name it in the annotation %s and set %s=%s to plan it",
		origin(rec), seed.Name, c.Message, manifest.AnnotationRecoverFromSnapshot, manifest.AnnotationRecover, manifest.RecoverDryRun)))
	return false
}

// restoreFailedSeed is the seed of a cluster that never formed whose
// restore of a snapshot failed, or nil.
func restoreFailedSeed(w *world) *v1alpha2.EtcdMember {
	if w.cluster.Status.ClusterID != "" {
		return nil
	}
	for _, m := range w.members {
		c := conditions.Get(m.Status.Conditions, conditions.Ready)
		if m.Spec.Restore != nil && !deleting(m) && c != nil && c.Reason == conditions.ReasonRestoreFailed {
			return m
		}
	}
	return nil
}

// regrowing completes the recovery once the target is reached again.
func (pl *planner) regrowing(rec *v1alpha2.RecoveryStatus) {
	w := pl.w
	if !targetReached(w) {
		return
	}
	next := withPhase(rec, v1alpha2.RecoveryCompleted, fmt.Sprintf("Recovered from %s; the cluster has its %d members again", origin(rec), w.desired()))
	next.CompletionTime = &metav1.Time{Time: w.now.Truncate(time.Second)}
	pl.setRecovery(next)
}

func withPhase(rec *v1alpha2.RecoveryStatus, phase, message string) *v1alpha2.RecoveryStatus {
	out := rec.DeepCopy()
	out.Phase = phase
	if message != "" {
		out.Message = message
	}
	return out
}
