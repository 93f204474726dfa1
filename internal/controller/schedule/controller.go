// Package schedule is the EtcdSnapshotSchedule controller: at each slot of
// its cron schedule it creates one EtcdSnapshot, named after the slot, so
// that a slot is never run twice, whatever restarts in between; after
// operator downtime only the latest missed slot runs. It keeps a bounded
// history of EtcdSnapshot objects, and passes its retention to the agent of
// each snapshot, which deletes the stored snapshots that fall out of it.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/recurring"
)

// Reconciler reconciles EtcdSnapshotSchedule objects.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshotschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshotschedules/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdSnapshotSchedule{}).
		Owns(&v1alpha2.EtcdSnapshot{}).
		Named("etcdsnapshotschedule").
		Complete(r)
}

// pass is what one reconcile works from.
type pass struct {
	sched    *v1alpha2.EtcdSnapshotSchedule
	original *v1alpha2.EtcdSnapshotSchedule
	children []v1alpha2.EtcdSnapshot
	now      time.Time
}

// Reconcile makes the snapshot of a slot that is due, trims the history and
// reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sched := &v1alpha2.EtcdSnapshotSchedule{}
	if err := r.Client.Get(ctx, req.NamespacedName, sched); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sched.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	p := &pass{sched: sched, original: sched.DeepCopy(), now: r.Clock.Now()}
	if err := r.loadChildren(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	observe(p)
	r.reportRetention(p)
	err := r.trimHistory(ctx, p)
	res, serr := r.schedule(ctx, p)
	if err == nil {
		err = serr
	}
	if werr := r.writeStatus(ctx, p); werr != nil && err == nil {
		err = werr
	}
	return res, err
}

// loadChildren lists the snapshots the schedule made, by its UID in their
// controller reference.
func (r *Reconciler) loadChildren(ctx context.Context, p *pass) error {
	list := &v1alpha2.EtcdSnapshotList{}
	if err := r.Client.List(ctx, list, client.InNamespace(p.sched.Namespace), client.MatchingLabels{manifest.LabelSchedule: p.sched.Name}); err != nil {
		return fmt.Errorf("listing the schedule's snapshots: %w", err)
	}
	for _, s := range list.Items {
		if ref := metav1.GetControllerOf(&s); ref != nil && ref.UID == p.sched.UID && s.DeletionTimestamp == nil {
			p.children = append(p.children, s)
		}
	}
	// Newest slot first.
	slices.SortFunc(p.children, func(a, b v1alpha2.EtcdSnapshot) int {
		return slotOf(&b).Compare(slotOf(&a))
	})
	return nil
}

// slotOf is the slot a snapshot was made for.
func slotOf(s *v1alpha2.EtcdSnapshot) time.Time {
	if t, err := time.Parse(time.RFC3339, s.Annotations[manifest.AnnotationScheduledAt]); err == nil {
		return t
	}
	return s.CreationTimestamp.Time
}

// finished: Failed, or Complete and, when it asked for verification,
// verified. A snapshot being verified still runs: the next slot waits for
// it (so the next snapshot's retention cannot delete the file being read
// back) and the history limits do not delete it (nor its Job with it).
func finished(s *v1alpha2.EtcdSnapshot) bool {
	return s.Status.Phase == v1alpha2.SnapshotFailed || (s.Status.Phase == v1alpha2.SnapshotComplete && !verifying(s))
}

// verifying: Complete, asked for verification, and not verified yet.
func verifying(s *v1alpha2.EtcdSnapshot) bool {
	if s.Status.Phase != v1alpha2.SnapshotComplete || !s.Spec.Verify {
		return false
	}
	c := conditions.Get(s.Status.Conditions, conditions.Verified)
	return c == nil || c.Status == metav1.ConditionUnknown
}

// observe reports the running snapshots and the latest success.
func observe(p *pass) {
	st := &p.sched.Status
	st.Active = nil
	for _, s := range p.children {
		if !finished(&s) {
			st.Active = append(st.Active, corev1Ref(s.Name))
		}
		if s.Status.Phase == v1alpha2.SnapshotComplete && s.Status.CompletionTime != nil &&
			(st.LastSuccessfulTime == nil || s.Status.CompletionTime.After(st.LastSuccessfulTime.Time)) {
			st.LastSuccessfulTime = s.Status.CompletionTime.DeepCopy()
		}
	}
}

func (r *Reconciler) writeStatus(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.original.Status, p.sched.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p.sched, client.MergeFrom(p.original)); err != nil {
		return fmt.Errorf("writing schedule status: %w", err)
	}
	return nil
}

func (p *pass) set(typ string, ok bool, reason, message string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	conditions.Set(&p.sched.Status.Conditions, p.sched.Generation, typ, st, reason, message, p.now)
}

// changed reports whether a condition would get a new message: Events are
// recorded only then, not at every pass.
func (p *pass) changed(typ, message string) bool {
	c := conditions.Get(p.original.Status.Conditions, typ)
	return c == nil || c.Message != message
}

// parse reads the schedule in its time zone, and reports a bad one.
func (r *Reconciler) parse(p *pass) (cron.Schedule, bool) {
	s, err := recurring.Parse(p.sched.Spec.Schedule, p.sched.Spec.TimeZone)
	var zoneErr *recurring.ZoneError
	switch {
	case errors.As(err, &zoneErr):
		r.invalid(p, conditions.ReasonInvalidTimeZone, "spec.timeZone "+err.Error())
		return nil, false
	case err != nil:
		r.invalid(p, conditions.ReasonInvalidSchedule, "spec.schedule "+err.Error())
		return nil, false
	}
	return s, true
}

func (r *Reconciler) invalid(p *pass, reason, message string) {
	if p.changed(conditions.Ready, message) {
		conditions.Record(r.Recorder, p.sched, true, reason, "Schedule", "%s", message)
	}
	p.set(conditions.Ready, false, reason, message+"; no snapshot is made until it is fixed")
	p.sched.Status.NextScheduleTime = nil
}

func logger(ctx context.Context, s *v1alpha2.EtcdSnapshotSchedule) func(string, ...any) {
	l := log.FromContext(ctx).WithValues("etcdsnapshotschedule", client.ObjectKeyFromObject(s))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
