package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// Making a recovery plan (see recover.go for how it is carried out): the
// survivor or the snapshot, the discarded members, the fate of their
// volumes, and the token that consents to exactly this plan.

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
