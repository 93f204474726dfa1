// Package cluster is the EtcdCluster controller: it decides which members exist
// and runs etcd's membership state machine (bootstrap a seed, add learners one
// at a time, promote them once caught up, remove members, pause and resume,
// replace lost members, roll members onto a new target), always projecting
// quorum first, on etcd's own fresh view of its health.
//
// A pass observes (observe.go: one snapshot of the members, their Pods and
// etcd's report), plans (plan.go: a pure function choosing at most one
// change, with its reason, in a documented priority), acts (act.go: carries
// the change out), and reports (status.go: conditions and Events, in one
// place, from the plan and its outcome). The steps that do not change etcd's
// membership (certificates, Services, the root password, the budget) run
// beside the plan and report their failures without holding it up.
package cluster

import (
	"cmp"
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
	"github.com/seed74754924/etcd-operator/internal/secretcache"
	"github.com/seed74754924/etcd-operator/internal/teardown"
)

// Reconciler reconciles EtcdCluster objects.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold (Secrets).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Dial      etcd.Dialer
	Clock     clock.PassiveClock
	Metrics   *metrics.Metrics
	// OperatorImage is this operator's image; with it a joining member's
	// Pod starts before the member is added to etcd (see package join).
	OperatorImage string
	// ClusterDomain is the cluster DNS domain the Certificates' names carry
	// besides the short forms; cluster.local when empty.
	ClusterDomain string
	// Workers is how many clusters are reconciled at once; DefaultWorkers
	// when 0.
	Workers int
	// MemberName draws a new member's name for a cluster;
	// manifest.MemberName when nil (tests give names in creation order).
	MemberName func(cluster string) string

	expect expectations
	seen   seenCache
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshots,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdsnapshotschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcddefrags,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdCluster{}).
		// Members report facts through status; every change matters here.
		Owns(&v1alpha2.EtcdMember{}).
		Owns(&corev1.Service{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&policyv1.PodDisruptionBudget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A joining member is added to etcd once its Pod's address is in the
		// headless Service's endpoints (cluster DNS serves it from there).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(clusterOfSlice)).
		// A rotated certificate or a changed password is acted on at once.
		// Only the Secrets' metadata is watched (see package secretcache).
		Watches(secretcache.Metadata(), handler.EnqueueRequestsFromMapFunc(r.clustersUsingSecret), builder.OnlyMetadata).
		// A defragmentation's request for the maintenance lock, and its
		// end, are answered at once (maintenance_lock.go).
		Watches(&v1alpha2.EtcdDefrag{}, handler.EnqueueRequestsFromMapFunc(clusterOfDefrag)).
		// A snapshot a change waits for (spec.snapshotBefore) ending lets
		// the change go on, or holds it, at once.
		Watches(&v1alpha2.EtcdSnapshot{}, handler.EnqueueRequestsFromMapFunc(clusterOfSnapshotBefore)).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultWorkers)}).
		Named("etcdcluster").
		Complete(r)
}

// DefaultWorkers is how many clusters are reconciled at once. A healthy
// cluster's pass takes milliseconds (the objects come from the cache, the
// members answer at once); a pass whose members do not answer holds its
// worker for the status calls' timeout (statusTimeout, the calls in
// parallel). With 16 workers, one cluster in ten of a thousand silent at
// once, each asked every healthPoll, takes about 100 × 2 s / 30 s ≈ 7 of
// them on average, and a change to a healthy cluster still finds a free
// one (make scale measures it).
const DefaultWorkers = 16

// alarmPoll is how often a cluster with an etcd alarm raised looks again:
// alarms are disarmed in etcd (by a defrag run, or by hand) under no watch,
// and the Degraded condition must not keep reporting one that is gone.
const alarmPoll = 10 * time.Second

// healthPoll is how often a cluster at rest asks etcd about itself again.
// A leader lost shows in the Pods' readiness, which is watched, but an alarm
// raised (NOSPACE, which readiness leaves out on purpose) shows nowhere in
// Kubernetes, and the leader and database metrics must not go stale. The
// look costs etcd a status call per member and the API server nothing (the
// objects come from the cache, and an unchanged status is not written).
const healthPoll = 30 * time.Second

// Reconcile observes, plans one change, carries it out and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &v1alpha2.EtcdCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(req.Namespace, req.Name)
			r.expect.forget(req.String())
			r.seen.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cluster.DeletionTimestamp != nil {
		// Members, Pods, PVCs, Services and the PDB go through owner
		// references; nothing is created or changed meanwhile.
		return ctrl.Result{}, nil
	}
	if !r.expect.statusSeen(req.String(), cluster.ResourceVersion, r.Clock.Now()) {
		// The cache still holds the cluster as it was before our last
		// status write; the write's watch event brings us back.
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	w, err := r.observe(ctx, cluster)
	if teardown.Ignorable(ctx, r.APIReader, cluster.Namespace, err) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !r.expect.satisfied(req.String(), w.members, w.now) {
		// The cache has not caught up with our own last create or delete; its
		// watch event brings us back. The timer only guards a lost event.
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	w = w.after(r.maintain(ctx, w))
	p := decide(w)
	o := r.act(ctx, w, p.change)
	w = w.after(o.learned)
	w, p, o = r.goOn(ctx, w, p, o)
	if err := r.reconcilePDB(ctx, w); err != nil {
		w = w.after(learned{failed: []string{err.Error()}})
	}
	if teardown.Ignorable(ctx, r.APIReader, cluster.Namespace, o.err) {
		// Everything in the namespace is going; creating more only fails.
		return ctrl.Result{}, nil
	}
	if err := r.report(ctx, w, p, o); err != nil {
		if apierrors.IsNotFound(err) || teardown.Ignorable(ctx, r.APIReader, cluster.Namespace, err) {
			// Deleted while the pass ran: nothing is left to report on.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	r.Metrics.ObserveCluster(w.cluster, w.members, w.etcd.list, w.etcd.leader)
	r.observeDayTwo(w)
	after := requeue(w, p, o)
	logPass(ctx, w, p, o, after)
	if o.err != nil {
		r.Metrics.ReconcileError(cluster.Namespace, cluster.Name)
		return ctrl.Result{}, o.err
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// logPass logs, at debug level (-v=1), what a pass saw, did and waits for:
// where a slow scenario's time went.
func logPass(ctx context.Context, w *world, p plan, o outcome, after time.Duration) {
	l := log.FromContext(ctx).V(1)
	if !l.Enabled() {
		return
	}
	kv := []any{"progress", p.progress.reason + ": " + p.progress.message, "requeueAfter", after.String()}
	if p.change != nil {
		kv = append(kv, "change", p.change.kind.String())
		if p.change.member != nil {
			kv = append(kv, "member", p.change.member.Name)
		}
	}
	if o.progress != nil {
		kv = append(kv, "outcome", o.progress.reason+": "+o.progress.message)
	}
	if o.err != nil {
		kv = append(kv, "error", o.err.Error())
	}
	if w.etcd.err != nil {
		kv = append(kv, "etcdError", w.etcd.err.Error())
	}
	for name, err := range w.etcd.statusErr {
		kv = append(kv, "statusError/"+name, err.Error())
	}
	l.Info("Pass", kv...)
}

// goOn carries out, in the same pass, what mayFollow (plan.go) lets
// follow the change just made: the planner decides again on this pass's
// view. After a latch the latched target is written first, as every latch
// is before anything acts on it (an operator stopped between the write and
// the step leaves what a pass that only latched leaves). After a removal
// the view is this pass's less the member just removed, which etcd
// confirmed gone, so the planner's quorum check sees the voters that stay
// as they answered moments ago, and etcd checks again itself (it refuses a
// removal that would leave fewer connected voters than a quorum); at most
// maxRemovalsPerPass removals in all.
func (r *Reconciler) goOn(ctx context.Context, w *world, p plan, o outcome) (*world, plan, outcome) {
	w, p, o = r.actAfterLatching(ctx, w, p, o)
	for range maxRemovalsPerPass - 1 {
		if o.removed == nil {
			break
		}
		w = w.without(o.removed)
		next := decide(w)
		if !mayFollow(p.change, true, next.change) {
			break
		}
		p, o = next, r.act(ctx, w, next.change)
		w = w.after(o.learned)
	}
	return w, p, o
}

// actAfterLatching goes on after a latch with the step mayFollow allows,
// once the latched status is written.
func (r *Reconciler) actAfterLatching(ctx context.Context, w *world, p plan, o outcome) (*world, plan, outcome) {
	c := p.change
	if c == nil || c.kind != latchStatus || o.err != nil || o.requeue > 0 {
		return w, p, o
	}
	next := decide(w)
	if !mayFollow(c, false, next.change) {
		return w, p, o
	}
	if err := r.report(ctx, w, p, o); err != nil {
		// The next pass latches it again.
		return w, p, outcome{err: err}
	}
	// What was written is the base of the pass's last status write.
	reported := *w
	reported.original = w.cluster.DeepCopy()
	o = r.act(ctx, &reported, next.change)
	return reported.after(o.learned), next, o
}

// maintain runs the steps beside the membership planner: the cert-manager
// Certificates, the Services, the root password. Each reports what went
// wrong into the world's features; none stops the pass. What the
// authentication step learned comes back to go into the world (after).
func (r *Reconciler) maintain(ctx context.Context, w *world) learned {
	if err := r.ensureCertificates(ctx, w); err != nil {
		w.features.failed = append(w.features.failed, err.Error())
		log.FromContext(ctx).Info("Ensuring the cert-manager Certificates failed; membership repair goes on", "error", err.Error())
	}
	if w.features.certManagerMissing != "" && w.cluster.Status.ClusterID == "" {
		// Nothing of a new cluster could start without its certificates:
		// nothing is created until cert-manager is there.
		return learned{}
	}
	if err := r.ensureTrust(ctx, w); err != nil {
		w.features.failed = append(w.features.failed, err.Error())
		log.FromContext(ctx).Info("Preparing the TLS hand-over failed; membership repair goes on", "error", err.Error())
	}
	if err := r.ensureServices(ctx, w); err != nil {
		w.features.failed = append(w.features.failed, err.Error())
		log.FromContext(ctx).Info("Ensuring the Services failed; membership repair goes on", "error", err.Error())
	}
	return r.syncAuth(ctx, w)
}

// requeue is the shortest of the timers the pass waits on: the plan's or the
// action's, the progress deadline, a joining member's own deadline, while
// etcd reports an alarm the poll that notices it disarmed, and, for a
// cluster that runs, the health poll. (Changed Secrets wake the cluster
// through their watch.)
func requeue(w *world, p plan, o outcome) time.Duration {
	var next time.Duration
	consider := func(d *time.Duration, pad time.Duration) {
		if d != nil && *d >= 0 && (next == 0 || *d+pad < next) {
			next = *d + pad
		}
	}
	if p.requeue > 0 {
		consider(&p.requeue, 0)
	}
	if o.requeue > 0 {
		consider(&o.requeue, 0)
	}
	consider(deadlineTimer(w), time.Second)
	consider(joinDeadline(w), time.Second)
	// A leaderless cluster is called quorum-less once the grace has passed.
	consider(quorumLossTimer(w), time.Second)
	if len(w.alarms()) > 0 {
		consider(ptr.To(alarmPoll), 0)
	}
	if w.handover.awaiting != "" {
		// cert-manager's Secrets are not watched until a member mounts
		// them.
		consider(ptr.To(awaitingMaterialPoll), 0)
	}
	if len(w.running()) > 0 {
		consider(ptr.To(healthPoll), 0)
	}
	return next
}

// clustersUsingSecret maps a Secret to the clusters whose members mount it
// or whose operator reads it.
func (r *Reconciler) clustersUsingSecret(ctx context.Context, o client.Object) []reconcile.Request {
	in, by := client.InNamespace(o.GetNamespace()), client.MatchingFields{index.Secret: o.GetName()}
	var out []reconcile.Request
	add := func(name string) {
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}
		if name != "" && !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	clusters := &v1alpha2.EtcdClusterList{}
	if err := r.Client.List(ctx, clusters, in, by); err != nil {
		log.FromContext(ctx).Error(err, "Listing the clusters that use a Secret", "secret", o.GetName())
	}
	for _, c := range clusters.Items {
		add(c.Name)
	}
	members := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, members, in, by); err != nil {
		log.FromContext(ctx).Error(err, "Listing the members that mount a Secret", "secret", o.GetName())
	}
	for _, m := range members.Items {
		if ref := metav1.GetControllerOf(&m); ref != nil && ref.Kind == "EtcdCluster" {
			add(ref.Name)
		}
	}
	return out
}

// clusterOfSlice maps an EndpointSlice of a cluster's headless Service (its
// labels are copied from the Service's) to the cluster. The headless Service
// is usually named after the cluster, but a member may record another (an
// adopted cluster's), so any slice of the cluster's but the client Service's
// counts.
func clusterOfSlice(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[manifest.LabelCluster]
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" || svc == "" || svc == manifest.ClientServiceName(name) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func logf(ctx context.Context, w *world) func(msg string, kv ...any) {
	l := log.FromContext(ctx).WithValues("etcdcluster", client.ObjectKeyFromObject(w.cluster))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}
