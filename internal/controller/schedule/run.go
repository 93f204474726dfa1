package schedule

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// maxSteps bounds the walk over missed slots: a schedule idle for longer
// starts the walk closer to now (see slots).
const maxSteps = 1000

// slots returns the latest slot in (since, now], zero if none, and the
// first slot after now.
func slots(s cron.Schedule, since, now time.Time) (latest, next time.Time) {
	first := s.Next(since)
	if first.IsZero() || first.After(now) {
		return time.Time{}, first
	}
	// Slots far behind: start the walk maxSteps intervals before now,
	// which still lies before the latest slot.
	if step := s.Next(first).Sub(first); step > 0 && now.Sub(first) > maxSteps*step {
		first = s.Next(now.Add(-maxSteps * step))
	}
	for t := first; !t.IsZero() && !t.After(now); t = s.Next(t) {
		latest = t
	}
	return latest, s.Next(now)
}

// schedule makes the snapshot of the latest due slot, once, and returns
// when to come back: at the next slot.
func (r *Reconciler) schedule(ctx context.Context, p *pass) (ctrl.Result, error) {
	sched := p.sched
	cs, ok := r.parse(p)
	if !ok {
		return ctrl.Result{}, nil
	}
	if sched.Spec.Suspend {
		sched.Status.NextScheduleTime = nil
		p.set(conditions.Ready, true, conditions.ReasonSuspended, "The schedule is suspended: no new snapshot is made")
		return ctrl.Result{}, nil
	}
	since := sched.CreationTimestamp.Time
	if last := sched.Status.LastScheduleTime; last != nil {
		since = last.Time
	}
	latest, next := slots(cs, since, p.now)
	sched.Status.NextScheduleTime = &metav1.Time{Time: next}
	// The next slot is a real timer: nothing else happens at that time.
	res := ctrl.Result{RequeueAfter: next.Sub(p.now) + time.Second}
	if latest.IsZero() {
		p.set(conditions.Ready, true, conditions.ReasonScheduled, "Next snapshot at "+next.UTC().Format(time.RFC3339))
		return res, nil
	}
	if d := sched.Spec.StartingDeadlineSeconds; d != nil && p.now.Sub(latest) > time.Duration(*d)*time.Second {
		msg := fmt.Sprintf("Skipped the snapshot due at %s: missed by more than startingDeadlineSeconds (%ds); next at %s",
			latest.UTC().Format(time.RFC3339), *d, next.UTC().Format(time.RFC3339))
		if p.changed(conditions.Ready, msg) {
			conditions.Record(r.Recorder, sched, true, conditions.ReasonMissedSchedule, "Schedule", "%s", msg)
		}
		p.set(conditions.Ready, true, conditions.ReasonMissedSchedule, msg)
		return res, nil
	}
	if len(sched.Status.Active) > 0 {
		// One snapshot at a time: the slot runs when the one in progress
		// finishes (its status change brings us back).
		p.set(conditions.Ready, true, conditions.ReasonScheduled, fmt.Sprintf("The snapshot due at %s waits for %s to finish",
			latest.UTC().Format(time.RFC3339), sched.Status.Active[0].Name))
		return res, nil
	}
	if err := r.create(ctx, p, latest); err != nil {
		return ctrl.Result{}, err
	}
	p.set(conditions.Ready, true, conditions.ReasonScheduled, "Next snapshot at "+next.UTC().Format(time.RFC3339))
	return res, nil
}

// SnapshotName is the name of a schedule's snapshot of a slot: the same slot
// always gets the same name, so it is made once whatever restarts.
func SnapshotName(schedule string, slot time.Time) string {
	return fmt.Sprintf("%s-%d", schedule, slot.Unix()/60)
}

// create makes the snapshot of a slot from the template.
func (r *Reconciler) create(ctx context.Context, p *pass, slot time.Time) error {
	sched := p.sched
	tmpl := sched.Spec.SnapshotTemplate
	labels, annotations := map[string]string{}, map[string]string{}
	if md := tmpl.Metadata; md != nil {
		maps.Copy(labels, md.Labels)
		maps.Copy(annotations, md.Annotations)
	}
	labels[manifest.LabelSchedule] = sched.Name
	labels[manifest.LabelCluster] = tmpl.Spec.ClusterRef.Name
	annotations[manifest.AnnotationScheduledAt] = slot.UTC().Format(time.RFC3339)
	s := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name: SnapshotName(sched.Name, slot), Namespace: sched.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sched, v1alpha2.GroupVersion.WithKind("EtcdSnapshotSchedule"))},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	err := r.Client.Create(ctx, s)
	if err := ignoreExists(err); err != nil {
		return fmt.Errorf("creating snapshot %s: %w", s.Name, err)
	}
	if err == nil {
		conditions.Record(r.Recorder, sched, false, "SnapshotCreated", "Schedule", "Created snapshot %s for the slot at %s", s.Name, slot.UTC().Format(time.RFC3339))
		logger(ctx, sched)("Created a scheduled snapshot", "snapshot", s.Name, "slot", slot)
	}
	sched.Status.LastScheduleTime = &metav1.Time{Time: slot}
	sched.Status.LastSnapshot = s.Name
	sched.Status.Active = append(sched.Status.Active, corev1Ref(s.Name))
	return nil
}

func corev1Ref(name string) corev1.LocalObjectReference {
	return corev1.LocalObjectReference{Name: name}
}
