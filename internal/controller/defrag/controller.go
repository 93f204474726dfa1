// Package defrag is the EtcdDefrag controller: it defragments the members
// of a cluster one at a time, followers first and the leader last after it
// handed its leadership to a follower, checking between two members that
// etcd itself reports the cluster healthy. A run is one-shot: Pending →
// Running → Complete or Failed; the last two are final.
package defrag

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// Timers and timeouts.
const (
	// statusTimeout bounds one member's Status call, an alarm list and an
	// alarm disarm.
	statusTimeout = 5 * time.Second
	// defragTimeout bounds one member's Defragment call: etcd blocks the
	// member while it rewrites its backend, which takes about a second
	// per few hundred MiB.
	defragTimeout = 5 * time.Minute
	// retry is the wait before looking again at what no watch reports:
	// etcd's health, and the gap between two members.
	retry = 10 * time.Second
	// settle is the wait after a leadership hand-over, which etcd reports
	// at once.
	settle = time.Second
	// maxMembers sizes the deadline: the most members a cluster has.
	maxMembers = 7
	// Deadline is how long a run may take from its start (or, if it never
	// started, from its creation): every member of the largest cluster
	// defragmented at the longest, with the gaps and probes between, and
	// one defragmentation to spare. 45m15s, as the reference API's.
	Deadline = maxMembers*(defragTimeout+retry+maxMembers*statusTimeout) + defragTimeout
)

// Reconciler reconciles EtcdDefrag objects.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets (not cached) for the etcd client's TLS and
	// credentials, and the runs of a cluster for the queue.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Dial      etcd.Dialer
	Clock     clock.PassiveClock
	// Metrics counts finished runs; nil records nothing.
	Metrics *metrics.Metrics
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefrags,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefrags/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdDefrag{}).
		// A queued run starts when the one ahead of it finishes.
		Watches(&v1alpha2.EtcdDefrag{}, handler.EnqueueRequestsFromMapFunc(r.sameCluster)).
		// A run waiting for a roll-out or a membership change goes on when
		// the cluster's status says it ended.
		Watches(&v1alpha2.EtcdCluster{}, handler.EnqueueRequestsFromMapFunc(r.ofCluster)).
		// Runs of different clusters go side by side; each cluster's are
		// serialised by the queue (queue.go).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("etcddefrag").
		Complete(r)
}

func (r *Reconciler) sameCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	d, ok := obj.(*v1alpha2.EtcdDefrag)
	if !ok {
		return nil
	}
	return r.activeRuns(ctx, d.Namespace, d.Spec.ClusterRef.Name)
}

func (r *Reconciler) ofCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.activeRuns(ctx, obj.GetNamespace(), obj.GetName())
}

// activeRuns are the unfinished runs for a cluster.
func (r *Reconciler) activeRuns(ctx context.Context, namespace, cluster string) []reconcile.Request {
	list := &v1alpha2.EtcdDefragList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		d := &list.Items[i]
		if d.Spec.ClusterRef.Name == cluster && !finished(d) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(d)})
		}
	}
	return out
}

// Reconcile takes a run one step on. Status is written before every etcd
// call that changes something and after it, so that an operator killed
// between any two calls resumes correctly (see run.go).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	d := &v1alpha2.EtcdDefrag{}
	if err := r.Client.Get(ctx, req.NamespacedName, d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if d.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	p := &pass{run: d, original: d.DeepCopy(), now: r.Clock.Now()}
	var res ctrl.Result
	var err error
	if !finished(d) {
		res, err = r.advance(ctx, p)
		p.close()
	}
	if werr := r.writeStatus(ctx, p); werr != nil {
		return ctrl.Result{}, werr
	}
	r.observeFinished(p)
	if err == nil && finished(d) {
		return r.expire(ctx, p)
	}
	return res, err
}

// finished: Complete and Failed are final.
func finished(d *v1alpha2.EtcdDefrag) bool {
	return d.Status.Phase == v1alpha2.DefragComplete || d.Status.Phase == v1alpha2.DefragFailed
}

// expire deletes a finished run once its ttlSecondsAfterFinished passed.
func (r *Reconciler) expire(ctx context.Context, p *pass) (ctrl.Result, error) {
	d := p.run
	if d.Spec.TTLSecondsAfterFinished == nil || d.Status.CompletedAt == nil {
		return ctrl.Result{}, nil
	}
	due := d.Status.CompletedAt.Add(time.Duration(*d.Spec.TTLSecondsAfterFinished) * time.Second)
	if left := due.Sub(p.now); left > 0 {
		// Nothing else happens to a finished run: wake when it is due.
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if err := r.Client.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the finished run: %w", err)
	}
	logger(ctx, d)("Deleted the finished run: its ttlSecondsAfterFinished passed")
	return ctrl.Result{}, nil
}

// writeStatus writes the run's status if it changed since the last write.
// A merge patch leaves metadata edits alone and needs no resourceVersion, so
// a label added during a long Defragment call cannot make the outcome
// recorded after it be lost (and the member defragmented again).
func (r *Reconciler) writeStatus(ctx context.Context, p *pass) error {
	if equality.Semantic.DeepEqual(p.original.Status, p.run.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p.run, client.MergeFrom(p.original)); err != nil {
		return fmt.Errorf("writing the run's status: %w", err)
	}
	p.original = p.run.DeepCopy()
	return nil
}

// check sets DefragChecked and reports whether its reason changed (Events
// that repeat a condition go out only then).
func (p *pass) check(ok bool, reason, message string) bool {
	var before *metav1.Condition
	if c := conditions.Get(p.run.Status.Conditions, conditions.DefragChecked); c != nil {
		// A copy: Set changes the condition in place.
		before = c.DeepCopy()
	}
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	conditions.Set(&p.run.Status.Conditions, p.run.Generation, conditions.DefragChecked, st, reason, message, p.now)
	return before == nil || before.Reason != reason || before.Status != st
}

func logger(ctx context.Context, d *v1alpha2.EtcdDefrag) func(string, ...any) {
	l := log.FromContext(ctx).WithValues("etcddefrag", client.ObjectKeyFromObject(d), "cluster", d.Spec.ClusterRef.Name)
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}

// olderFirst orders runs by creation, then name: the oldest goes first.
func olderFirst(a, b *v1alpha2.EtcdDefrag) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// observeFinished records the run's metrics in the pass that made it
// Complete or Failed (after its status is written: once).
func (r *Reconciler) observeFinished(p *pass) {
	d := p.run
	if !finished(d) || finished(p.original) {
		return
	}
	res := metrics.DefragResult{Namespace: d.Namespace, Cluster: d.Spec.ClusterRef.Name, Policy: d.Labels[manifest.LabelDefragPolicy],
		Result: metrics.DefragComplete, Completed: p.now}
	if d.Status.Phase != v1alpha2.DefragComplete {
		res.Result = "Failed"
		if c := conditions.Get(d.Status.Conditions, conditions.DefragChecked); c != nil && c.Reason != "" {
			res.Result = c.Reason
		}
	}
	if d.Status.StartedAt != nil {
		res.Duration = p.now.Sub(d.Status.StartedAt.Time)
	}
	for _, m := range d.Status.Members {
		res.ReclaimedBytes += m.ReclaimedBytes
	}
	r.Metrics.DefragFinished(res)
}
