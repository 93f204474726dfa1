package schedule

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/recurring"
)

// Defaults of the history limits, for objects made before the API server
// defaulted them.
const (
	defaultSuccessfulLimit = 3
	defaultFailedLimit     = 1
)

// expired picks the finished snapshots to delete: Complete ones beyond the
// successful history limit or outside the retention (whose stored files the
// agent deletes), and Failed ones beyond the failed history limit. The
// newest Complete one is kept whatever its age, as its stored file is, and
// so is one whose verification runs.
func expired(p *pass) []v1alpha2.EtcdSnapshot {
	spec := p.sched.Spec
	okLimit := int(ptr.Deref(spec.SuccessfulSnapshotsHistoryLimit, defaultSuccessfulLimit))
	failLimit := int(ptr.Deref(spec.FailedSnapshotsHistoryLimit, defaultFailedLimit))
	var maxAge time.Duration
	if r := spec.Retention; r != nil {
		if r.KeepLast != nil {
			okLimit = min(okLimit, int(*r.KeepLast))
		}
		maxAge, _ = time.ParseDuration(r.MaxAge)
	}
	var complete, failed []v1alpha2.EtcdSnapshot
	for _, s := range p.children {
		switch {
		case verifying(&s):
			// Kept until its verification ends; counted after.
		case s.Status.Phase == v1alpha2.SnapshotComplete:
			complete = append(complete, s)
		case s.Status.Phase == v1alpha2.SnapshotFailed:
			failed = append(failed, s)
		}
	}
	bySlot := func(s v1alpha2.EtcdSnapshot) time.Time { return slotOf(&s) }
	out := recurring.Expired(failed, failLimit, bySlot)
	beyond := recurring.Expired(complete, okLimit, bySlot)
	out = append(out, beyond...)
	// Within the limit, those older than maxAge go too, except the newest.
	for i, s := range complete[:len(complete)-len(beyond)] {
		if maxAge > 0 && i > 0 && s.Status.CompletionTime != nil && p.now.Sub(s.Status.CompletionTime.Time) > maxAge {
			out = append(out, s)
		}
	}
	return out
}

// trimHistory deletes the expired snapshot objects. Their stored files are
// not touched here: retention in the agent deletes those.
func (r *Reconciler) trimHistory(ctx context.Context, p *pass) error {
	for _, s := range expired(p) {
		if err := r.Client.Delete(ctx, &s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting old snapshot %s: %w", s.Name, err)
		}
		logger(ctx, p.sched)("Deleted an old snapshot object", "snapshot", s.Name, "phase", s.Status.Phase)
	}
	return nil
}

// reportRetention sets RetentionApplied from what the agent of the newest
// Complete snapshot reported.
func (r *Reconciler) reportRetention(p *pass) {
	if p.sched.Spec.Retention == nil {
		return
	}
	for _, s := range p.children {
		if s.Status.Phase != v1alpha2.SnapshotComplete {
			continue
		}
		rr := s.Status.Retention
		switch {
		case rr != nil && rr.Error != "":
			msg := fmt.Sprintf("After snapshot %s, retention could not delete every old snapshot: %s", s.Name, rr.Error)
			if p.changed(conditions.RetentionApplied, msg) {
				conditions.Record(r.Recorder, p.sched, true, conditions.ReasonRetentionFailed, "Prune", "%s", msg)
			}
			p.set(conditions.RetentionApplied, false, conditions.ReasonRetentionFailed, msg)
		case rr != nil:
			msg := fmt.Sprintf("After snapshot %s, deleted %d stored snapshots: %s", s.Name, rr.PrunedCount, strings.Join(rr.Pruned, ", "))
			if p.changed(conditions.RetentionApplied, msg) {
				conditions.Record(r.Recorder, p.sched, false, conditions.ReasonRetentionDone, "Prune", "%s", msg)
			}
			p.set(conditions.RetentionApplied, true, conditions.ReasonRetentionDone, msg)
		default:
			p.set(conditions.RetentionApplied, true, conditions.ReasonRetentionDone, fmt.Sprintf("After snapshot %s, nothing was due for deletion", s.Name))
		}
		return
	}
}
