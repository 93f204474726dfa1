// Package defragpolicy is the EtcdDefragPolicy controller: at each tick of
// its cron schedule it makes one EtcdDefrag, named after the tick, so that a
// tick is never run twice whatever restarts in between; after downtime only
// the latest missed tick runs. It keeps a bounded history of finished runs.
// The policy never defragments anything itself: each run goes through the
// EtcdDefrag controller and its safety rules.
package defragpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Reconciler reconciles EtcdDefragPolicy objects.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefragpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefragpolicies/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefrags,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdDefragPolicy{}).
		Owns(&v1alpha2.EtcdDefrag{}).
		Named("etcddefragpolicy").
		Complete(r)
}

// pass is what one reconcile works from.
type pass struct {
	policy   *v1alpha2.EtcdDefragPolicy
	original *v1alpha2.EtcdDefragPolicy
	runs     []v1alpha2.EtcdDefrag
	now      time.Time
}

// Reconcile observes the policy's runs, trims their history, makes the run
// of a tick that is due, and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &v1alpha2.EtcdDefragPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if policy.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	p := &pass{policy: policy, original: policy.DeepCopy(), now: r.Clock.Now()}
	if errs := validation.IsValidLabelValue(policy.Name); len(errs) > 0 {
		// Its runs could neither be labelled nor listed: retrying cannot help.
		r.refuse(p, conditions.ReasonRunRejected, fmt.Sprintf("The policy's name cannot be the value of the label %s on its runs (%s): recreate the policy under a name of at most 63 characters; no run is made",
			manifest.LabelDefragPolicy, strings.Join(errs, "; ")))
		return ctrl.Result{}, r.writeStatus(ctx, p)
	}
	if err := r.loadRuns(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	observe(p)
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

// loadRuns lists the runs the policy made: by its label, and among those
// only the ones it controls (by UID), so that a run of an earlier policy of
// the same name, or a hand-made object carrying the label, is never counted
// or deleted.
func (r *Reconciler) loadRuns(ctx context.Context, p *pass) error {
	list := &v1alpha2.EtcdDefragList{}
	if err := r.Client.List(ctx, list, client.InNamespace(p.policy.Namespace),
		client.MatchingLabels{manifest.LabelDefragPolicy: p.policy.Name}); err != nil {
		return fmt.Errorf("listing the policy's runs: %w", err)
	}
	for _, d := range list.Items {
		if ref := metav1.GetControllerOf(&d); ref != nil && ref.UID == p.policy.UID && d.DeletionTimestamp == nil {
			p.runs = append(p.runs, d)
		}
	}
	return nil
}

func finished(d *v1alpha2.EtcdDefrag) bool {
	return d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed
}

// observe reports the unfinished runs, by name, and the latest success
// (which only moves forward).
func observe(p *pass) {
	st := &p.policy.Status
	st.Active = nil
	for _, d := range p.runs {
		if !finished(&d) {
			st.Active = append(st.Active, corev1Ref(d.Name))
		}
		if d.Status.Phase == v1alpha2.DefragComplete && d.Status.CompletedAt != nil &&
			(st.LastSuccessfulTime == nil || d.Status.CompletedAt.After(st.LastSuccessfulTime.Time)) {
			st.LastSuccessfulTime = d.Status.CompletedAt.DeepCopy()
		}
	}
	sortActive(st)
}

func sortActive(st *v1alpha2.EtcdDefragPolicyStatus) {
	slices.SortFunc(st.Active, func(a, b corev1.LocalObjectReference) int { return strings.Compare(a.Name, b.Name) })
}

func (r *Reconciler) writeStatus(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.original.Status, p.policy.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p.policy, client.MergeFrom(p.original)); err != nil {
		return fmt.Errorf("writing policy status: %w", err)
	}
	return nil
}

func (p *pass) set(ok bool, reason, message string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	conditions.Set(&p.policy.Status.Conditions, p.policy.Generation, conditions.Active, st, reason, message, p.now)
}

// changed reports whether the Active condition would get a new message:
// Events about a lasting state are recorded only then, not at every pass.
func (p *pass) changed(message string) bool {
	c := conditions.Get(p.original.Status.Conditions, conditions.Active)
	return c == nil || c.Message != message
}

func logger(ctx context.Context, p *v1alpha2.EtcdDefragPolicy) func(string, ...any) {
	l := log.FromContext(ctx).WithValues("etcddefragpolicy", client.ObjectKeyFromObject(p))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}
