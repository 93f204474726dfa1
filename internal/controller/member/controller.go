// Package member is the EtcdMember controller: it makes one member real (PVC,
// Pod, flags), reports facts about it (etcd member ID, voter or learner,
// readiness, running version, whether it is lost). It holds the member's
// finalizer, but removing a member from etcd is the cluster controller's
// (finalizer.go): it releases the finalizer only when there is no cluster
// left to remove the member from.
package member

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
	"github.com/seed74754924/etcd-operator/internal/secretcache"
	"github.com/seed74754924/etcd-operator/internal/teardown"
)

// Reconciler reconciles EtcdMember objects.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Dial      etcd.Dialer
	Clock     clock.PassiveClock
	// EtcdRepository is the etcd image repository.
	EtcdRepository string
	// OperatorImage is this operator's image; with it a joining member's
	// Pod starts before the member is added, held by the join gate, and a
	// restored cluster's seed runs the restore agent.
	OperatorImage string
	// ToolsVolume is how a new Pod gets the operator's binary (one of
	// manifest.ToolsVolumes; empty is auto).
	ToolsVolume string
	// Metrics counts restores that failed; nil records nothing.
	Metrics *metrics.Metrics
	// Workers is how many members are reconciled at once; DefaultWorkers
	// when 0.
	Workers int

	// silences paces the Status calls of members that do not answer.
	silences silences
}

// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers/status,verbs=patch
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdmembers/finalizers,verbs=update
// +kubebuilder:rbac:groups=etcd-operator.cozystack.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// DefaultWorkers is how many members are reconciled at once. A member
// whose etcd does not answer holds its worker for its status call's
// timeout (statusTimeout, then silentTimeout while it stays silent), and
// is asked again more and more rarely (backOff): three hundred silent
// members (a thousand clusters, one in ten cut off) cost about 300 × 1 s
// / 30 s = 10 workers' time on average, which 32 leave room beside.
const DefaultWorkers = 32

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha2.EtcdMember{}).
		Owns(&corev1.Pod{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		// A node going away makes its members lost; only a change of its
		// readiness matters, not its periodic status updates.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.membersOnNode),
			builder.WithPredicates(nodeReadinessChanged())).
		// A member waiting for a Secret (one cert-manager is issuing)
		// starts when it appears. Only the Secrets' metadata is watched
		// (see package secretcache).
		Watches(secretcache.Metadata(), handler.EnqueueRequestsFromMapFunc(r.membersMounting), builder.OnlyMetadata).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultWorkers)}).
		Named("etcdmember").
		Complete(r)
}

// membersOnNode maps a Node event to the members whose Pods run there.
func (r *Reconciler) membersOnNode(ctx context.Context, obj client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.MatchingFields{index.PodNode: obj.GetName()}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, p := range pods.Items {
		if ref := ownerMember(&p); ref != "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: ref}})
		}
	}
	return out
}

// membersMounting maps a Secret to the members that mount it.
func (r *Reconciler) membersMounting(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{index.Secret: obj.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return out
}

// nodeReadinessChanged passes Node updates that change the Ready condition.
func nodeReadinessChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return nodeReady(e.ObjectOld.(*corev1.Node)) != nodeReady(e.ObjectNew.(*corev1.Node))
		},
	}
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func ownerMember(p *corev1.Pod) string {
	for _, ref := range p.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "EtcdMember" && ref.APIVersion == v1alpha2.GroupVersion.String() {
			return ref.Name
		}
	}
	return ""
}

// state is what one pass works from.
type state struct {
	member   *v1alpha2.EtcdMember
	original *v1alpha2.EtcdMember
	cluster  *v1alpha2.EtcdCluster // nil when the cluster is gone
	pod      *corev1.Pod           // nil when there is none
	now      time.Time
}

// Reconcile makes the member real and reports on it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &v1alpha2.EtcdMember{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s, err := r.load(ctx, m)
	if m.DeletionTimestamp != nil && (err == nil || s != nil) {
		// Releasing a member needs only its cluster: a Pod that cannot be
		// read (the namespace and the operator's Role in it are going)
		// must not hold the finalizer.
		return r.finalize(ctx, s)
	}
	if teardown.Ignorable(ctx, r.APIReader, m.Namespace, err) {
		// Everything in the namespace is going.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.settleIdentity(ctx, s); err != nil {
		if teardown.Ignorable(ctx, r.APIReader, m.Namespace, err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	res, err := r.realize(ctx, s)
	if teardown.Ignorable(ctx, r.APIReader, m.Namespace, err) {
		// Everything in the namespace is going; creating more only fails.
		return ctrl.Result{}, nil
	}
	if werr := r.writeStatus(ctx, s); werr != nil && err == nil {
		err = werr
	}
	return res, err
}

// settleIdentity adds the finalizer before anything else exists, so that a
// deletion at any later point still removes the member from etcd, and
// records the Service its DNS names live under, which (with its name) makes
// its peer URL: from then on neither an annotation nor a label changes who
// the member is.
func (r *Reconciler) settleIdentity(ctx context.Context, s *state) error {
	m := s.member
	if controllerutil.ContainsFinalizer(m, manifest.MemberFinalizer) && m.Spec.ServiceName != "" {
		return nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.AddFinalizer(m, manifest.MemberFinalizer)
	m.Spec.ServiceName = manifest.ServiceName(m)
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	s.original = m.DeepCopy()
	return nil
}

func (r *Reconciler) load(ctx context.Context, m *v1alpha2.EtcdMember) (*state, error) {
	s := &state{member: m, original: m.DeepCopy(), now: r.Clock.Now()}
	c := &v1alpha2.EtcdCluster{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, c)
	switch {
	case err == nil && controlledBy(m, c):
		s.cluster = c
	case err == nil:
		// A cluster of the same name that did not create this member (an
		// earlier incarnation did): it is an orphan.
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading cluster %s: %w", m.Spec.ClusterName, err)
	}
	pod, err := r.loadPod(ctx, m)
	s.pod = pod
	return s, err
}

// controlledBy reports whether the cluster created the member.
func controlledBy(m *v1alpha2.EtcdMember, c *v1alpha2.EtcdCluster) bool {
	ref := metav1.GetControllerOf(m)
	return ref != nil && ref.UID == c.UID
}

// loadPod reads the member's Pod from the cache, which holds only Pods
// labelled as the operator's; when a Pod is expected but the cache has none,
// the API server confirms, so that a Pod whose labels were edited is never
// taken for a lost one.
func (r *Reconciler) loadPod(ctx context.Context, m *v1alpha2.EtcdMember) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: m.Namespace, Name: m.Name}
	err := r.Client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) && m.Status.PodUID != "" {
		err = r.APIReader.Get(ctx, key, pod)
	}
	switch {
	case err == nil:
		return pod, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	default:
		return nil, fmt.Errorf("reading pod: %w", err)
	}
}

// realize brings the Pod and PVC in line with the member.
func (r *Reconciler) realize(ctx context.Context, s *state) (ctrl.Result, error) {
	m := s.member
	switch {
	case s.cluster == nil || s.cluster.DeletionTimestamp != nil:
		// The cluster is going and garbage collection follows: nothing is
		// created or restarted meanwhile.
		return ctrl.Result{}, nil
	case m.Spec.InitialCluster == "" && !manifest.EarlyStart(m, r.OperatorImage):
		// etcd does not know this member yet: starting it would fail.
		setPending(s)
		return ctrl.Result{}, nil
	case m.Spec.Dormant:
		return r.sleep(ctx, s)
	}
	if podLost(s) || r.claimLost(ctx, s) {
		return ctrl.Result{}, nil
	}
	if ok, err := r.ensurePVC(ctx, s); err != nil || !ok {
		// The claim's binding event brings us back.
		return ctrl.Result{}, err
	}
	if s.pod == nil {
		return r.createPod(ctx, s)
	}
	if !ownedBy(s.pod, m) {
		r.setNotReady(s, "PodNotOwned", fmt.Sprintf("Pod %s exists but belongs to something else; delete it so the member can start", s.pod.Name))
		return ctrl.Result{}, nil
	}
	if adoptedPodFailing(s.pod) {
		return r.replaceAdoptedPod(ctx, s)
	}
	if err := r.syncPod(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.observe(ctx, s)
}

func (r *Reconciler) event(obj client.Object, warning bool, reason, action, format string, args ...any) {
	conditions.Record(r.Recorder, obj, warning, reason, action, format, args...)
}

func logger(ctx context.Context, m *v1alpha2.EtcdMember) func(string, ...any) {
	l := log.FromContext(ctx).WithValues("etcdmember", client.ObjectKeyFromObject(m))
	return func(msg string, kv ...any) { l.Info(msg, kv...) }
}
