package schedule

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/recurring"
)

// schedule makes the snapshot of the latest due slot, once, and returns
// when to come back: at the next slot. A slot due while a snapshot runs
// waits for it to finish.
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
	plan := recurring.Decide(cs, since, p.now, len(sched.Status.Active), recurring.Rules{
		StartingDeadlineSeconds: sched.Spec.StartingDeadlineSeconds, Concurrency: recurring.Wait,
	})
	latest, next := plan.Tick, plan.Next
	sched.Status.NextScheduleTime = &metav1.Time{Time: next}
	// The next slot is a real timer: nothing else happens at that time.
	res := ctrl.Result{RequeueAfter: plan.RequeueAfter(p.now)}
	switch plan.Action {
	case recurring.Idle:
		p.set(conditions.Ready, true, conditions.ReasonScheduled, "Next snapshot at "+next.UTC().Format(time.RFC3339))
		return res, nil
	case recurring.SkipLate:
		d := *sched.Spec.StartingDeadlineSeconds
		msg := fmt.Sprintf("Skipped the snapshot due at %s: missed by more than startingDeadlineSeconds (%ds); next at %s",
			latest.UTC().Format(time.RFC3339), d, next.UTC().Format(time.RFC3339))
		if p.changed(conditions.Ready, msg) {
			conditions.Record(r.Recorder, sched, true, conditions.ReasonMissedSchedule, "Schedule", "%s", msg)
		}
		p.set(conditions.Ready, true, conditions.ReasonMissedSchedule, msg)
		return res, nil
	case recurring.Hold:
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
	s.Spec.Verify = verifyThisOne(sched)
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
	// Counted with the slot in one status write: a snapshot made again
	// after a lost write (AlreadyExists) is counted once, and was given
	// the same verify as the first time.
	sched.Status.SnapshotsMade++
	sched.Status.Active = append(sched.Status.Active, corev1Ref(s.Name))
	return nil
}

// verifyThisOne says whether the next snapshot is verified: the template
// asks for verification, and it is the first or an Nth after it.
func verifyThisOne(sched *v1alpha2.EtcdSnapshotSchedule) bool {
	if !sched.Spec.SnapshotTemplate.Spec.Verify {
		return false
	}
	every := int64(1)
	if n := sched.Spec.VerifyEvery; n != nil && *n > 1 {
		every = int64(*n)
	}
	return sched.Status.SnapshotsMade%every == 0
}

func corev1Ref(name string) corev1.LocalObjectReference {
	return corev1.LocalObjectReference{Name: name}
}
