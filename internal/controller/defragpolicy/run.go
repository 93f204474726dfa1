package defragpolicy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/recurring"
)

// collapseAfter: a backlog of more ticks than this (a policy suspended or
// an operator down for long) is run once, for now, rather than for its
// latest tick.
const collapseAfter = 100

func corev1Ref(name string) corev1.LocalObjectReference {
	return corev1.LocalObjectReference{Name: name}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// concurrency maps the policy's setting to the shared rule; unset is
// Forbid.
func concurrency(p *v1alpha2.EtcdDefragPolicy) recurring.Concurrency {
	if p.Spec.ConcurrencyPolicy == v1alpha2.DefragConcurrencyAllow {
		return recurring.Allow
	}
	return recurring.Forbid
}

// schedule handles the latest due tick, once, and returns when to come
// back: at the next tick.
func (r *Reconciler) schedule(ctx context.Context, p *pass) (ctrl.Result, error) {
	pol := p.policy
	if ptr.Deref(pol.Spec.Suspend, false) {
		pol.Status.NextScheduleTime = nil
		p.set(false, conditions.ReasonSuspended, "The policy is suspended: no new run is made; runs already made go on")
		return ctrl.Result{}, nil
	}
	cs, ok := r.parse(p)
	if !ok {
		return ctrl.Result{}, nil
	}
	since := pol.CreationTimestamp.Time
	if last := pol.Status.LastScheduleTime; last != nil {
		since = last.Time
	}
	plan := recurring.Decide(cs, since, p.now, len(pol.Status.Active), recurring.Rules{
		StartingDeadlineSeconds: pol.Spec.StartingDeadlineSeconds,
		Concurrency:             concurrency(pol),
		CollapseAfter:           collapseAfter,
	})
	pol.Status.NextScheduleTime = nil
	next := "never (the schedule has no later tick)"
	if !plan.Next.IsZero() {
		pol.Status.NextScheduleTime = &metav1.Time{Time: plan.Next}
		next = stamp(plan.Next)
	}
	// The next tick is a real timer: nothing else happens at that time.
	res := ctrl.Result{RequeueAfter: plan.RequeueAfter(p.now)}
	switch plan.Action {
	case recurring.Idle:
		p.set(true, conditions.ReasonScheduled, "Next run at "+next)
	case recurring.SkipLate:
		msg := fmt.Sprintf("Skipped the run due at %s: missed by more than startingDeadlineSeconds (%ds); next run at %s",
			stamp(plan.Tick), *pol.Spec.StartingDeadlineSeconds, next)
		conditions.Record(r.Recorder, pol, true, conditions.ReasonMissedSchedule, "Schedule", "%s", msg)
		pol.Status.LastScheduleTime = &metav1.Time{Time: plan.Tick}
		p.set(true, conditions.ReasonScheduled, msg)
	case recurring.SkipBusy:
		msg := fmt.Sprintf("Skipped the run due at %s: %s has not finished and concurrencyPolicy is Forbid; next run at %s",
			stamp(plan.Tick), pol.Status.Active[0].Name, next)
		conditions.Record(r.Recorder, pol, false, conditions.ReasonConcurrencyForbidden, "Schedule", "%s", msg)
		pol.Status.LastScheduleTime = &metav1.Time{Time: plan.Tick}
		p.set(true, conditions.ReasonScheduled, msg)
	case recurring.Run:
		return r.run(ctx, p, plan, next, res)
	}
	return res, nil
}

// parse reads the schedule in its time zone, and reports a bad one.
func (r *Reconciler) parse(p *pass) (cron.Schedule, bool) {
	s, err := recurring.Parse(p.policy.Spec.Schedule, p.policy.Spec.TimeZone)
	var zoneErr *recurring.ZoneError
	switch {
	case errors.As(err, &zoneErr):
		r.refuse(p, conditions.ReasonInvalidTimeZone, "spec.timeZone "+err.Error()+"; no run is made until it is fixed")
		return nil, false
	case err != nil:
		r.refuse(p, conditions.ReasonInvalidSchedule, "spec.schedule "+err.Error()+
			"; use five cron fields or a descriptor such as @daily, optionally after CRON_TZ=<zone>; no run is made until it is fixed")
		return nil, false
	}
	return s, true
}

// refuse reports what stops the policy: Active=False with the reason, and
// a Warning Event the first time the message appears. A spec change brings
// the policy back; nothing else can fix it, so there is no requeue.
func (r *Reconciler) refuse(p *pass, reason, message string) {
	if p.changed(message) {
		conditions.Record(r.Recorder, p.policy, true, reason, "Schedule", "%s", message)
	}
	p.set(false, reason, message)
	p.policy.Status.NextScheduleTime = nil
}

// run makes the run of the due tick.
func (r *Reconciler) run(ctx context.Context, p *pass, plan recurring.Plan, next string, res ctrl.Result) (ctrl.Result, error) {
	pol := p.policy
	if pol.Spec.ClusterRef.Name == "" {
		r.refuse(p, conditions.ReasonRunRejected, "spec.clusterRef.name is empty: set it to the EtcdCluster to defragment; no run is made until then")
		return ctrl.Result{}, nil
	}
	d := manifest.DefragRun(pol, plan.Tick)
	err := r.Client.Create(ctx, d)
	switch {
	case apierrors.IsAlreadyExists(err):
		// The tick's run was made by an earlier pass whose status write was
		// lost; it counts only if it is this policy's.
		if ok, err := r.ownRun(ctx, p, d); err != nil || !ok {
			return ctrl.Result{}, err
		}
		logger(ctx, pol)("The run of this tick exists already", "etcddefrag", d.Name, "tick", plan.Tick)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		r.refuse(p, conditions.ReasonRunRejected, fmt.Sprintf("The API server refused run %s: %v; fix the policy's spec, no run is made until then", d.Name, err))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("creating run %s: %w", d.Name, err)
	default:
		conditions.Record(r.Recorder, pol, false, conditions.ReasonStampedRun, "Schedule", "Made run %s for the tick at %s", d.Name, stamp(plan.Tick))
		logger(ctx, pol)("Made a scheduled defragmentation run", "etcddefrag", d.Name, "tick", plan.Tick, "collapsed", plan.Collapsed)
	}
	if !hasActive(pol.Status.Active, d.Name) {
		pol.Status.Active = append(pol.Status.Active, corev1Ref(d.Name))
		sortActive(&pol.Status)
	}
	pol.Status.LastScheduleTime = &metav1.Time{Time: plan.Tick}
	msg := "Next run at " + next
	if plan.Collapsed {
		msg = fmt.Sprintf("More than %d ticks were missed: made one run, %s, for now; next run at %s", collapseAfter, d.Name, next)
	}
	p.set(true, conditions.ReasonScheduled, msg)
	return res, nil
}

// ownRun reports whether an existing run of the tick's name is this
// policy's; if not, the policy is stopped with a message saying so.
func (r *Reconciler) ownRun(ctx context.Context, p *pass, want *v1alpha2.EtcdDefrag) (bool, error) {
	got := &v1alpha2.EtcdDefrag{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		return false, fmt.Errorf("reading run %s: %w", want.Name, err)
	}
	if ref := metav1.GetControllerOf(got); ref != nil && ref.UID == p.policy.UID {
		return true, nil
	}
	r.refuse(p, conditions.ReasonRunRejected, fmt.Sprintf(
		"An EtcdDefrag named %s exists and is not this policy's: delete it or rename the policy; no run is made until then", want.Name))
	return false, nil
}

func hasActive(refs []corev1.LocalObjectReference, name string) bool {
	for _, r := range refs {
		if r.Name == name {
			return true
		}
	}
	return false
}
