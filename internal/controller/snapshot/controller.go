// Package snapshot is the EtcdSnapshot controller: it runs one Job per
// snapshot, whose agent streams etcd's snapshot to S3 or a volume, and
// records the agent's result (read from its container's termination
// message) in the snapshot's status. Phases go Pending → Started →
// Complete or Failed; the last two are final. A Complete snapshot that asks
// for verification then gets one more Job, which restores it into scratch
// space and compares; its Verified condition says how that went.
package snapshot

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// Timers. Each waits for something no watch reports.
const (
	// waitForCluster bounds how long a snapshot waits for its cluster to
	// form (and to turn auth on, when it asks for auth).
	waitForCluster = 15 * time.Minute
	// resultLag: the Job counts a Pod as done a moment before its status
	// (with the termination message) is in the cache.
	resultLag = 2 * time.Second
	// resultGiveUp: a finished Job whose Pod never shows a result.
	resultGiveUp = 2 * time.Minute
)

// Reconciler reconciles EtcdSnapshot objects.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold (Secrets, claims) and
	// confirms what it seems to have lost.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// OperatorImage runs the snapshot agent.
	OperatorImage string
	// EtcdRepository is the etcd image repository, whose etcdutl the
	// verification restores with.
	EtcdRepository string
	// Metrics counts verifications; nil records nothing.
	Metrics *metrics.Metrics
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshots,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshots/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshotschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdSnapshot{}).
		Owns(&batchv1.Job{}).
		// A snapshot waiting for its cluster to form starts when it has.
		Watches(&v1alpha2.EtcdCluster{}, handler.EnqueueRequestsFromMapFunc(r.waitingOn)).
		Named("etcdsnapshot").
		Complete(r)
}

// waitingOn maps a cluster to its snapshots that have not started.
func (r *Reconciler) waitingOn(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &v1alpha2.EtcdSnapshotList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if s.Spec.ClusterRef.Name == obj.GetName() && (s.Status.Phase == "" || s.Status.Phase == v1alpha2.SnapshotPending) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}

// pass is what one reconcile works on.
type pass struct {
	snap     *v1alpha2.EtcdSnapshot
	original *v1alpha2.EtcdSnapshot
	now      time.Time
	// verdict is the result of a verification that finished in this
	// pass, counted once its status is written.
	verdict string
}

// Reconcile moves a snapshot one phase on, and writes its status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &v1alpha2.EtcdSnapshot{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	p := &pass{snap: s, original: s.DeepCopy(), now: r.Clock.Now()}
	var res ctrl.Result
	var err error
	switch s.Status.Phase {
	case v1alpha2.SnapshotComplete:
		err = r.removeFinishedJob(ctx, s)
		if err == nil && s.Spec.Verify {
			res, err = r.verify(ctx, p)
		}
	case v1alpha2.SnapshotFailed:
		// Final: the Job stays for its logs, until the snapshot goes.
	default:
		res, err = r.advance(ctx, p)
	}
	werr := r.writeStatus(ctx, p)
	if werr != nil && err == nil {
		err = werr
	}
	if werr == nil && p.verdict != "" {
		r.Metrics.SnapshotVerified(s.Namespace, s.Spec.ClusterRef.Name, p.verdict)
	}
	if werr == nil {
		r.observeFinished(p)
	}
	return res, err
}

// observeFinished records the snapshot's metrics in the pass that made it
// Complete or Failed (after its status is written: once).
func (r *Reconciler) observeFinished(p *pass) {
	s := p.snap
	if s.Status.Phase == p.original.Status.Phase || (s.Status.Phase != v1alpha2.SnapshotComplete && s.Status.Phase != v1alpha2.SnapshotFailed) {
		return
	}
	res := metrics.SnapshotResult{Namespace: s.Namespace, Cluster: s.Spec.ClusterRef.Name, Schedule: s.Labels[manifest.LabelSchedule], Completed: p.now}
	if s.Status.Phase == v1alpha2.SnapshotComplete {
		res.Result = metrics.SnapshotStored
		if s.Status.StartTime != nil {
			res.Duration = p.now.Sub(s.Status.StartTime.Time)
		}
		if s.Status.Artifact != nil {
			res.SizeBytes = s.Status.Artifact.SizeBytes
		}
	} else if c := conditions.Get(s.Status.Conditions, conditions.Ready); c != nil {
		res.Result = c.Reason
	}
	r.Metrics.SnapshotFinished(res)
}

// advance takes a snapshot that is not final one step on.
func (r *Reconciler) advance(ctx context.Context, p *pass) (ctrl.Result, error) {
	s := p.snap
	if s.Status.Phase == "" {
		s.Status.Phase = v1alpha2.SnapshotPending
		p.ready(false, "Pending", "The snapshot is about to start")
	}
	if r.OperatorImage == "" {
		r.fail(p, conditions.ReasonOperatorImageNotConfigured,
			"The operator has no image to run the snapshot agent with: start it with --operator-image (the Helm chart sets it), then create the snapshot again")
		return ctrl.Result{}, nil
	}
	job := &batchv1.Job{}
	err := r.Client.Get(ctx, jobKey(s), job)
	switch {
	case err == nil:
		return r.follow(ctx, p, job)
	case client.IgnoreNotFound(err) != nil:
		return ctrl.Result{}, fmt.Errorf("reading the snapshot Job: %w", err)
	case s.Status.Phase == v1alpha2.SnapshotStarted:
		return r.jobGone(ctx, p)
	}
	return r.start(ctx, p)
}

// jobGone fails a started snapshot whose Job is gone, once the API server
// confirms it: the snapshot is never taken twice by the same object.
func (r *Reconciler) jobGone(ctx context.Context, p *pass) (ctrl.Result, error) {
	if err := r.APIReader.Get(ctx, jobKey(p.snap), &batchv1.Job{}); client.IgnoreNotFound(err) != nil || err == nil {
		// Still there (the cache lags), or unknown: look again.
		return ctrl.Result{RequeueAfter: resultLag}, client.IgnoreNotFound(err)
	}
	r.fail(p, conditions.ReasonSnapshotJobLost,
		fmt.Sprintf("The snapshot Job %s was deleted before it reported a result; create a new EtcdSnapshot", jobKey(p.snap).Name))
	return ctrl.Result{}, nil
}

// fail ends the snapshot as Failed with a Warning Event.
func (r *Reconciler) fail(p *pass, reason, message string) {
	p.snap.Status.Phase = v1alpha2.SnapshotFailed
	p.snap.Status.CompletionTime = &metav1.Time{Time: p.now}
	p.ready(false, reason, message)
	conditions.Record(r.Recorder, p.snap, true, reason, "Snapshot", "%s", message)
}

func (p *pass) ready(ok bool, reason, message string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	conditions.Set(&p.snap.Status.Conditions, p.snap.Generation, conditions.Ready, st, reason, message, p.now)
}

func (r *Reconciler) writeStatus(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.original.Status, p.snap.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p.snap, client.MergeFrom(p.original)); err != nil {
		return fmt.Errorf("writing snapshot status: %w", err)
	}
	return nil
}

func logger(ctx context.Context, s *v1alpha2.EtcdSnapshot) func(string, ...any) {
	l := log.FromContext(ctx).WithValues("etcdsnapshot", client.ObjectKeyFromObject(s))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}
