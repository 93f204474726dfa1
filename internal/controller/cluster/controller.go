// Package cluster is the EtcdCluster controller: it decides which members exist
// and runs etcd's membership state machine (bootstrap a seed, add learners one
// at a time, promote them once caught up, remove members newest first, pause
// and resume, replace lost members), always projecting quorum first.
package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	expect expectations
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
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
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("etcdcluster").
		Complete(r)
}

// secretPoll is how often a cluster whose members mount Secrets looks at
// them again: Secrets are not watched (that would cache every Secret).
const secretPoll = 30 * time.Second

// step is one stage of a reconcile. A non-nil result stops the pass with it.
type step func(ctx context.Context, w *world) (*ctrl.Result, error)

// Reconcile runs the stages in order and always finishes with the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &v1alpha2.EtcdCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(req.Namespace, req.Name)
			r.expect.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cluster.DeletionTimestamp != nil {
		// Members, Pods, PVCs, Services and the PDB go through owner
		// references; nothing is created or changed meanwhile.
		return ctrl.Result{}, nil
	}
	w, err := r.snapshot(ctx, cluster)
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
	res, stepErr := r.runSteps(ctx, w)
	if err := r.reconcilePDB(ctx, w); err != nil && stepErr == nil {
		stepErr = err
	}
	if teardown.Ignorable(ctx, r.APIReader, cluster.Namespace, stepErr) {
		// Everything in the namespace is going; creating more only fails.
		return ctrl.Result{}, nil
	}
	if err := r.writeStatus(ctx, w); err != nil {
		if teardown.Ignorable(ctx, r.APIReader, cluster.Namespace, err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	r.Metrics.ObserveCluster(w.cluster, w.members, w.etcdMembers)
	if stepErr != nil {
		r.Metrics.ReconcileError(cluster.Namespace, cluster.Name)
		return ctrl.Result{}, stepErr
	}
	// Come back when the progress deadline, or a joining member's own
	// deadline, expires, if nothing else does first; and, for members that
	// mount Secrets, soon enough to notice rotated certificates.
	var poll *time.Duration
	if len(w.secrets) > 0 {
		poll = ptr.To(secretPoll - time.Second)
	}
	for _, d := range []*time.Duration{wanted(w), joinDeadline(w), poll} {
		if d != nil && (res.RequeueAfter == 0 || *d+time.Second < res.RequeueAfter) {
			res.RequeueAfter = *d + time.Second
		}
	}
	return res, nil
}

func (r *Reconciler) runSteps(ctx context.Context, w *world) (ctrl.Result, error) {
	steps := []step{
		r.ensureCertificates,
		r.ensureServices,
		r.initialize,
		r.latchTarget,
		r.bootstrap,
		r.authLatch,
		r.readEtcd,
		r.recordJoined,
		r.changeMembership,
		r.scale,
		r.rollOut,
		r.enableAuth,
	}
	for _, s := range steps {
		res, err := s(ctx, w)
		if err != nil {
			return ctrl.Result{}, err
		}
		if res != nil {
			return *res, nil
		}
	}
	return ctrl.Result{}, nil
}

// snapshot gathers the members the cluster controls, by the UID in their
// controller reference: labels can be edited, and members of an earlier
// cluster of the same name are not ours to touch.
func (r *Reconciler) snapshot(ctx context.Context, c *v1alpha2.EtcdCluster) (*world, error) {
	list := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), index.ByController(string(c.UID))); err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	w := &world{cluster: c, original: c.DeepCopy(), now: r.Clock.Now(), pods: map[string]*corev1.Pod{}}
	for i := range list.Items {
		m := &list.Items[i]
		w.members = append(w.members, m)
		pod := &corev1.Pod{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, pod); err == nil {
			w.pods[m.Name] = pod
		}
	}
	if err := r.readSecrets(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

// readSecrets reads the Secrets the running members mount, from the API
// server: the operator does not cache Secrets. A missing Secret or key is
// recorded, not an error: the members report it, and a roll-out holds.
func (r *Reconciler) readSecrets(ctx context.Context, w *world) error {
	for _, m := range w.running() {
		for _, u := range manifest.MountedSecrets(m) {
			sec, ok := w.secrets[u.Name]
			if !ok {
				sec = &corev1.Secret{}
				err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: u.Name}, sec)
				switch {
				case apierrors.IsNotFound(err):
					sec = nil
				case err != nil:
					return fmt.Errorf("reading Secret %s: %w", u.Name, err)
				}
				if w.secrets == nil {
					w.secrets = map[string]*corev1.Secret{}
				}
				w.secrets[u.Name] = sec
			}
			switch {
			case w.secretProblem != "":
			case sec == nil:
				w.secretProblem = fmt.Sprintf("Secret %s (the %s) does not exist", u.Name, u.Purpose)
			case u.MissingKey(sec) != "":
				w.secretProblem = fmt.Sprintf("Secret %s (the %s) has no key %s", u.Name, u.Purpose, u.MissingKey(sec))
			}
		}
	}
	for name, sec := range w.secrets {
		if sec == nil {
			delete(w.secrets, name)
		}
	}
	return nil
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

// stop ends the pass, optionally coming back after a real timer.
func stop(after time.Duration) *ctrl.Result { return &ctrl.Result{RequeueAfter: after} }

// done ends the pass and waits for the next watch event.
func done() *ctrl.Result { return &ctrl.Result{} }

func logf(ctx context.Context, w *world) func(msg string, kv ...any) {
	l := log.FromContext(ctx).WithValues("etcdcluster", client.ObjectKeyFromObject(w.cluster))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}
