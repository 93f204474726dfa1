package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// Recovery from quorum loss: explicit, consented, never automatic.
//
// A cluster that lost quorum (quorumloss.go says exactly when: the members
// say so, for quorumLossGrace) reports it (Available=False, QuorumLost,
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

// seenCache keeps the last report each member's etcd gave this operator
// process, per cluster: a discarded member's "last known" applied index.
type seenCache struct {
	mu sync.Mutex
	by map[string]map[types.UID]seenReport
}

// seenReport is a member's last report.
type seenReport struct {
	applied uint64
	at      time.Time
}

// record notes the reports of this pass, forgets members that are gone,
// and returns what is known of every member of the world, by name.
func (c *seenCache) record(w *world) map[string]seenReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]map[types.UID]seenReport{}
	}
	key := w.cluster.Namespace + "/" + w.cluster.Name
	before, now := c.by[key], map[types.UID]seenReport{}
	out := map[string]seenReport{}
	for _, m := range w.members {
		r, ok := before[m.UID]
		if st := w.etcd.status[m.Name]; st != nil {
			r, ok = seenReport{applied: st.RaftAppliedIndex, at: w.now}, true
		}
		if ok {
			now[m.UID], out[m.Name] = r, r
		}
	}
	c.by[key] = now
	return out
}

// withRecorded adds, for the members this process has no report of, the
// reports the cluster's status kept from when it became leaderless (an
// operator restarted during the incident knows nothing else of them).
func withRecorded(seen map[string]seenReport, recorded []v1alpha2.MemberReport) map[string]seenReport {
	if seen == nil {
		seen = map[string]seenReport{}
	}
	for _, r := range recorded {
		if _, ok := seen[r.Name]; !ok && r.AppliedIndex >= 0 {
			seen[r.Name] = seenReport{applied: uint64(r.AppliedIndex), at: r.Time.Time}
		}
	}
	return seen
}

// lastReports is what status.lastReports holds after this pass: while the
// cluster is leaderless, every member's last report known to this pass,
// by name; nil otherwise.
func lastReports(w *world) []v1alpha2.MemberReport {
	if noLeaderSince(w) == nil {
		return nil
	}
	// A pass that could not dial etcd has no reports of its own.
	seen := withRecorded(maps.Clone(w.seen), w.cluster.Status.LastReports)
	var out []v1alpha2.MemberReport
	for _, m := range w.members {
		r, ok := seen[m.Name]
		if !ok {
			continue
		}
		report := v1alpha2.MemberReport{Name: m.Name, AppliedIndex: int64(r.applied), Time: metav1.Time{Time: r.at.Truncate(time.Second)}}
		// A member answering without a leader applies nothing: its report
		// keeps the time it was first recorded, so passes write no status.
		if i := slices.IndexFunc(w.cluster.Status.LastReports, func(k v1alpha2.MemberReport) bool { return k.Name == m.Name }); i >= 0 &&
			w.cluster.Status.LastReports[i].AppliedIndex == report.AppliedIndex {
			report.Time = w.cluster.Status.LastReports[i].Time
		}
		out = append(out, report)
	}
	slices.SortFunc(out, func(a, b v1alpha2.MemberReport) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// forget drops what is known of a cluster's members (the cluster is gone).
func (c *seenCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, key)
}

// recoveryPlan makes the plan of a recovery from the world, as made at
// the given time: the survivor, the discarded members and the token, or
// why none is possible.
func recoveryPlan(w *world, at time.Time) *v1alpha2.RecoveryStatus {
	if w.cluster.Annotations[manifest.AnnotationRecoverFromSnapshot] != "" {
		return snapshotPlan(w, at)
	}
	survivor, skipped := pickSurvivor(w)
	if survivor == nil {
		msg := "no member's etcd answers, so none can be the survivor"
		if len(skipped) > 0 {
			msg = strings.Join(skipped, "; ")
		}
		return refused("No recovery from a survivor is possible: %s. Name an EtcdSnapshot to rebuild the cluster from in the annotation %s", msg, manifest.AnnotationRecoverFromSnapshot)
	}
	st := w.etcd.status[survivor.Name]
	rec := &v1alpha2.RecoveryStatus{
		Phase: v1alpha2.RecoveryPlanned,
		Survivor: &v1alpha2.RecoveryMember{Name: survivor.Name, MemberID: etcd.FormatID(st.MemberID),
			AppliedIndex: ptrInt64(st.RaftAppliedIndex), State: "answers without a leader"},
	}
	rec.Discarded = discarded(w, survivor)
	rec.KeptClaims = keptClaims(w, rec)
	stamp(rec, at)
	var ahead []string
	for _, d := range rec.Discarded {
		if d.AppliedIndex != nil && *d.AppliedIndex > *rec.Survivor.AppliedIndex {
			ahead = append(ahead, fmt.Sprintf("%s (%d)", d.Name, *d.AppliedIndex))
		}
	}
	rec.Token = recoveryToken(w, rec)
	names := discardedNames(rec)
	rec.Message = fmt.Sprintf("Stop %s, restart %s (applied index %d) as the only member of the cluster (etcd's --force-new-cluster), then delete %s %s, "+
		"then grow back to %d members through learners. To carry this plan out, set the annotation %s=%s before %s",
		orNone(names), survivor.Name, st.RaftAppliedIndex, orNone(names), volumesFate(rec), w.desired(), manifest.AnnotationRecover, rec.Token, rec.ExpiryTime.UTC().Format(time.RFC3339))
	if len(ahead) > 0 {
		rec.Message += fmt.Sprintf(". Warning: %s last reported a higher applied index than the survivor: writes only they applied will be lost", strings.Join(ahead, ", "))
	}
	if len(skipped) > 0 {
		rec.Message += ". Not eligible as the survivor: " + strings.Join(skipped, "; ")
	}
	return rec
}

// keptClaims are the claims of the discarded members a plan keeps: all of
// those on volumes, unless the cluster's annotation asks for them to go.
func keptClaims(w *world, rec *v1alpha2.RecoveryStatus) []string {
	if w.cluster.Annotations[manifest.AnnotationRecoverDiscardVolumes] == "true" {
		return nil
	}
	var out []string
	for _, d := range rec.Discarded {
		if m := w.memberNamed(d.Name); m != nil && m.Spec.Storage.Medium != v1alpha2.StorageMediumMemory {
			out = append(out, manifest.PVCName(d.Name))
		}
	}
	slices.Sort(out)
	return out
}

// volumesFate says what becomes of the discarded members' volumes.
func volumesFate(rec *v1alpha2.RecoveryStatus) string {
	if len(rec.KeptClaims) == 0 {
		return "with their volumes"
	}
	return fmt.Sprintf("keeping their claims (%s, labelled %s) for you to delete", strings.Join(rec.KeptClaims, ", "), manifest.LabelDiscardedFrom)
}

// stamp dates a plan: made at, good until tokenValidity later.
func stamp(rec *v1alpha2.RecoveryStatus, at time.Time) {
	at = at.Truncate(time.Second)
	rec.PlanTime = &metav1.Time{Time: at}
	rec.ExpiryTime = &metav1.Time{Time: at.Add(tokenValidity)}
}

// tokenValidity is how long a plan's token is accepted after the plan was
// made: long enough to read the plan and answer, short enough that a token
// left in the annotation (or restored with it from a backup) is not consent
// to whatever plan comes next.
const tokenValidity = 10 * time.Minute

func refused(format string, args ...any) *v1alpha2.RecoveryStatus {
	return &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryRefused, Message: fmt.Sprintf(format, args...)}
}

// discarded lists every member but the survivor, with the applied index it
// reports now or last reported to this operator.
func discarded(w *world, survivor *v1alpha2.EtcdMember) []v1alpha2.RecoveryMember {
	var out []v1alpha2.RecoveryMember
	for _, m := range w.members {
		if m == survivor || deleting(m) {
			continue
		}
		d := v1alpha2.RecoveryMember{Name: m.Name, MemberID: m.Status.MemberID, State: memberState(w, m)}
		if st := w.etcd.status[m.Name]; st != nil {
			d.AppliedIndex = ptrInt64(st.RaftAppliedIndex)
		} else if seen, ok := w.seen[m.Name]; ok {
			d.AppliedIndex = ptrInt64(seen.applied)
			d.LastSeen = &metav1.Time{Time: seen.at.Truncate(time.Second)}
		}
		out = append(out, d)
	}
	return out
}

func discardedNames(rec *v1alpha2.RecoveryStatus) []string {
	var out []string
	for _, d := range rec.Discarded {
		out = append(out, d.Name)
	}
	return out
}

// snapshotPlan is the plan of a recovery from the EtcdSnapshot the
// annotation names: every member goes, and a new seed restores it.
func snapshotPlan(w *world, at time.Time) *v1alpha2.RecoveryStatus {
	name := w.cluster.Annotations[manifest.AnnotationRecoverFromSnapshot]
	s := w.recoverySnapshot
	switch {
	case w.recoverySnapshotErr != nil:
		return refused("Reading EtcdSnapshot %s failed: %v", name, w.recoverySnapshotErr)
	case s == nil:
		return refused("EtcdSnapshot %s does not exist in namespace %s", name, w.cluster.Namespace)
	case s.Status.Phase != v1alpha2.SnapshotComplete || s.Status.Artifact == nil:
		return refused("EtcdSnapshot %s is not complete (phase %q): only a stored snapshot can be restored", name, s.Status.Phase)
	case w.cluster.Spec.Storage.Medium == v1alpha2.StorageMediumMemory:
		return refused("The cluster keeps its data in memory (storage.medium: Memory), which a restore cannot seed; create a new EtcdCluster on volumes with spec.bootstrap.restore")
	}
	if why := unrestorable(w, s); why != "" {
		return refused("EtcdSnapshot %s cannot rebuild this cluster: %s. Nothing was changed; name another snapshot", name, why)
	}
	src, err := manifest.ArtifactSource(s)
	if err != nil {
		return refused("EtcdSnapshot %s: %v", name, err)
	}
	rec := &v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryPlanned, Snapshot: name,
		Restore: &v1alpha2.RestoreSpec{Source: src}, Discarded: discarded(w, nil)}
	rec.KeptClaims = keptClaims(w, rec)
	stamp(rec, at)
	rec.Token = recoveryToken(w, rec)
	taken := "at an unknown time"
	if s.Status.CompletionTime != nil {
		taken = "completed " + s.Status.CompletionTime.UTC().Format(time.RFC3339)
	}
	rec.Message = fmt.Sprintf("Delete every member (%s) "+volumesFate(rec)+", then bootstrap the cluster again from EtcdSnapshot %s (revision %d, %s) "+
		"and grow it back to %d members: every write after the snapshot is lost, and the cluster gets a new cluster ID. "+
		"To carry this plan out, set the annotation %s=%s before %s",
		orNone(discardedNames(rec)), name, s.Status.Artifact.Revision, taken, w.desired(), manifest.AnnotationRecover, rec.Token,
		rec.ExpiryTime.UTC().Format(time.RFC3339)) + unverified(s)
	return rec
}

// restoreReserve is the room a restored member needs beside the database:
// etcd's first write-ahead log segment, preallocated at its start.
const restoreReserve = 64 << 20

// unrestorable says why a complete snapshot would fail to seed the
// cluster, from what can be known before every member is deleted: a
// verification that failed, an etcd minor newer than the cluster's (the
// storage format only moves forward), a database larger than a member's
// volume. "" when none applies.
func unrestorable(w *world, s *v1alpha2.EtcdSnapshot) string {
	if c := conditions.Get(s.Status.Conditions, conditions.Verified); c != nil && c.Status == metav1.ConditionFalse {
		return fmt.Sprintf("its verification failed (%s: %s)", c.Reason, c.Message)
	}
	a := s.Status.Artifact
	target := w.cluster.Spec.Version
	if w.cluster.Status.Observed != nil && w.cluster.Status.Observed.Version != "" {
		target = w.cluster.Status.Observed.Version
	}
	from, err1 := version.Parse(a.EtcdVersion)
	to, err2 := version.Parse(target)
	if err1 == nil && err2 == nil && (from.Major > to.Major || from.Major == to.Major && from.Minor > to.Minor) {
		return fmt.Sprintf("it was taken from etcd %s, a newer minor than the cluster's %s", a.EtcdVersion, target)
	}
	if size := w.cluster.Spec.Storage.Size; a.SizeBytes > 0 && !size.IsZero() && a.SizeBytes+restoreReserve > size.Value() {
		return fmt.Sprintf("its database (%d bytes) and etcd's first log segment do not fit a member's volume of %s", a.SizeBytes, size.String())
	}
	return ""
}

// unverified warns, in a plan, of a snapshot that was never read back.
func unverified(s *v1alpha2.EtcdSnapshot) string {
	if c := conditions.Get(s.Status.Conditions, conditions.Verified); c != nil && c.Status == metav1.ConditionTrue {
		return ""
	}
	return ". Warning: this snapshot was never verified (spec.verify); it is restored as stored"
}

// origin names what a recovery rebuilds the cluster from.
func origin(rec *v1alpha2.RecoveryStatus) string {
	if rec.Snapshot != "" {
		return "EtcdSnapshot " + rec.Snapshot
	}
	if rec.Survivor != nil {
		return rec.Survivor.Name
	}
	return "the survivor"
}

// pickSurvivor chooses the voter whose etcd answers with the highest applied
// index (then the highest term, then the name), and says why the others
// that answer cannot be chosen.
func pickSurvivor(w *world) (*v1alpha2.EtcdMember, []string) {
	var best *v1alpha2.EtcdMember
	var skipped []string
	for _, m := range w.running() {
		st := w.etcd.status[m.Name]
		switch {
		case st == nil:
			continue
		case st.IsLearner:
			skipped = append(skipped, m.Name+" is a learner")
			continue
		case lost(m):
			skipped = append(skipped, m.Name+" is lost")
			continue
		case m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory:
			skipped = append(skipped, m.Name+" keeps its data in memory, which a restart loses")
			continue
		}
		if best == nil || better(st, w.etcd.status[best.Name], m.Name, best.Name) {
			best = m
		}
	}
	return best, skipped
}

func better(a, b *etcd.Status, an, bn string) bool {
	if a.RaftAppliedIndex != b.RaftAppliedIndex {
		return a.RaftAppliedIndex > b.RaftAppliedIndex
	}
	if a.RaftTerm != b.RaftTerm {
		return a.RaftTerm > b.RaftTerm
	}
	return an < bn
}

// memberState says in a few stable words what the operator knows of a
// member now.
func memberState(w *world, m *v1alpha2.EtcdMember) string {
	switch {
	case lost(m):
		c := conditions.Get(m.Status.Conditions, conditions.Lost)
		return "lost: " + c.Message
	case m.Spec.Dormant:
		return "dormant"
	case m.Spec.InitialCluster == "":
		return "never joined"
	case w.pods[m.Name] == nil:
		return "no Pod"
	case w.etcd.status[m.Name] != nil:
		return "answers without a leader"
	}
	return "does not answer"
}

// recoveryToken is a short hash of what the plan does and when it was
// made: the same plan made at the same time has the same token whatever
// order its members are listed in, and a plan made again (after it
// expired, after any other answer, after it was carried out) has a new one.
func recoveryToken(w *world, rec *v1alpha2.RecoveryStatus) string {
	h := sha256.New()
	if rec.Survivor != nil {
		fmt.Fprintf(h, "%s/%s/%s", w.cluster.UID, rec.Survivor.Name, rec.Survivor.MemberID)
	} else {
		fmt.Fprintf(h, "%s/snapshot/%s/%s", w.cluster.UID, rec.Snapshot, w.recoverySnapshot.UID)
	}
	ds := slices.Clone(rec.Discarded)
	slices.SortFunc(ds, func(a, b v1alpha2.RecoveryMember) int { return strings.Compare(a.Name, b.Name) })
	for _, d := range ds {
		fmt.Fprintf(h, "/%s:%s", d.Name, d.MemberID)
	}
	fmt.Fprintf(h, "/keep:%s", strings.Join(rec.KeptClaims, ","))
	if rec.PlanTime != nil {
		fmt.Fprintf(h, "@%d", rec.PlanTime.Unix())
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func ptrInt64(v uint64) *int64 {
	n := int64(v)
	return &n
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no other member"
	}
	return strings.Join(names, ", ")
}

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
			return pl.act(&change{kind: clearForce, member: marked, reason: conditions.ReasonForceMarkRemoved, message: why})
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
			pl.setRecovery(&v1alpha2.RecoveryStatus{Phase: v1alpha2.RecoveryNotNeeded, Request: req, Message: notNeededMessage(req)})
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
func notNeededMessage(req string) string {
	msg := "etcd has a leader and a quorum (or the cluster is paused, or no member has been leaderless for " + quorumLossGrace.String() + "): nothing to recover"
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
		return pl.act(&change{kind: fence, member: m, message: "plan " + rec.Token})
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
	return pl.act(&change{kind: forceNewCluster, member: s, message: rec.Token})
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
			return pl.act(&change{kind: unfence, member: m, message: "the recovery stopped: " + why})
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
		return pl.act(&change{kind: clearForce, member: s})
	case s.Annotations[manifest.AnnotationForceNewCluster] == "":
		// Only the Pod carries the mark (the operator stopped between the
		// two): finish taking it off, whatever etcd says.
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, rec.Message))
		return pl.act(&change{kind: clearForce, member: s})
	case pod == nil || pod.DeletionTimestamp != nil:
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, fmt.Sprintf("Waiting for the new Pod of %s", s.Name)))
		return pl.wait(0, conditions.ReasonRecoveringQuorum, "Waiting for the new Pod of survivor %s", s.Name)
	case pod.Annotations[manifest.AnnotationForceNewCluster] == "":
		// Its Pod was made before the mark: restart it.
		pl.setRecovery(withPhase(rec, v1alpha2.RecoveryForcingNewCluster, rec.Message))
		pl.working(conditions.ReasonRecoveringQuorum, "Restarting survivor %s with --force-new-cluster", s.Name)
		return pl.act(&change{kind: forceNewCluster, member: s, message: s.Annotations[manifest.AnnotationForceNewCluster]})
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
		return pl.act(&change{kind: discard, member: m, reason: conditions.ReasonRecoveringQuorum, keepClaim: keeps(rec, m),
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
			return pl.act(&change{kind: discard, member: m, reason: conditions.ReasonRecoveringQuorum, keepClaim: keeps(rec, m),
				message: fmt.Sprintf("Deleting member %s, discarded by the recovery from %s", m.Name, origin(rec))})
		}
	}
	for _, m := range w.members {
		if controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) {
			return pl.act(&change{kind: release, member: m, message: "discarded by the recovery from " + origin(rec)})
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
	next.Recovery = withPhase(rec, v1alpha2.RecoveryRebootstrapping, "Bootstrapping the cluster again from "+origin(rec))
	pl.p.recoverySet = false
	return pl.act(&change{kind: latchStatus, status: next, reason: conditions.ReasonRecoveringQuorum,
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
