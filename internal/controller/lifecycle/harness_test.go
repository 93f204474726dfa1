package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	clusterctrl "github.com/seed74754924/etcd-operator/internal/controller/cluster"
	memberctrl "github.com/seed74754924/etcd-operator/internal/controller/member"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	etcdfake "github.com/seed74754924/etcd-operator/internal/etcd/fake"
	"github.com/seed74754924/etcd-operator/internal/faults"
)

const ns = "default"

// harness runs both controllers against a fake API server and a fake etcd,
// with a kubelet stand-in that starts member Pods in the fake etcd.
type harness struct {
	t     *testing.T
	c     client.Client
	raw   client.WithWatch
	etcd  *etcdfake.Cluster
	clock *clocktesting.FakeClock

	cluster *clusterctrl.Reconciler
	member  *memberctrl.Reconciler

	// Crash injection: a life started by restart(k) ends after k mutating
	// calls (API writes and etcd membership changes); every later call fails
	// until the next restart builds new controllers, as a new process would.
	// mutations counts the operator's mutating calls over all lives.
	life      *faults.Life
	mutations int
	crashed   bool
	uids      int

	// broken names Pods whose etcd the kubelet will not start.
	broken map[string]bool
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, broken: map[string]bool{}, etcd: etcdfake.New(0xc1), clock: clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))}
	raw := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&v1alpha2.EtcdCluster{}, &v1alpha2.EtcdMember{}, &corev1.Pod{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	// The harness itself (kubelet, garbage collector, checks) uses the raw
	// client; only the operator's calls count and can crash.
	h.c, h.raw = raw, raw
	h.restart(0)
	return h
}

// restart replaces the controllers, losing every in-memory state. With
// crashAfter > 0 the new life ends after that many mutating calls.
func (h *harness) restart(crashAfter int) {
	h.life = nil
	if crashAfter > 0 {
		h.life = faults.NewLife(crashAfter, func() { h.crashed = true })
	}
	counting := interceptor.NewClient(h.raw, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetUID() == "" {
				// The fake API server assigns no UIDs; owner references need them.
				h.uids++
				obj.SetUID(types.UID(fmt.Sprintf("uid-%d", h.uids)))
			}
			return h.count(c.Create(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return h.count(c.Patch(ctx, obj, patch, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return h.count(c.Delete(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return h.count(c.SubResource(sub).Patch(ctx, obj, patch, opts...))
		},
	})
	operator := h.life.Client(counting)
	rec := &events.FakeRecorder{}
	dial := h.life.Dialer(h.countingDialer())
	h.cluster = &clusterctrl.Reconciler{Client: operator, APIReader: operator, Recorder: rec, Dial: dial, Clock: h.clock}
	h.member = &memberctrl.Reconciler{Client: operator, APIReader: operator, Recorder: rec, Dial: dial, Clock: h.clock}
}

// count counts a successful mutating call.
func (h *harness) count(err error) error {
	if err == nil {
		h.mutations++
	}
	return err
}

// countingDialer wraps the fake etcd so that membership changes count.
func (h *harness) countingDialer() etcd.Dialer {
	inner := h.etcd.Dialer()
	return func(ctx context.Context, cfg etcd.Config) (etcd.Client, error) {
		c, err := inner(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &countingClient{Client: c, h: h}, nil
	}
}

type countingClient struct {
	etcd.Client
	h *harness
}

func (c *countingClient) MemberAddAsLearner(ctx context.Context, urls []string) (*etcd.Member, error) {
	m, err := c.Client.MemberAddAsLearner(ctx, urls)
	return m, c.h.count(err)
}

func (c *countingClient) MemberPromote(ctx context.Context, id uint64) error {
	return c.h.count(c.Client.MemberPromote(ctx, id))
}

func (c *countingClient) MemberRemove(ctx context.Context, id uint64) error {
	return c.h.count(c.Client.MemberRemove(ctx, id))
}

// createCluster creates an EtcdCluster with defaults the API server would set.
func (h *harness) createCluster(name string, replicas int32, mods ...func(*v1alpha2.EtcdCluster)) {
	h.t.Helper()
	c := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
		Spec: v1alpha2.EtcdClusterSpec{
			Replicas: ptr.To(replicas), Version: "3.6.16", ProgressDeadlineSeconds: ptr.To[int32](600),
			Storage: v1alpha2.StorageSpec{Size: mustQuantity("1Gi")},
		},
	}
	for _, m := range mods {
		m(c)
	}
	if err := h.c.Create(context.Background(), c); err != nil {
		h.t.Fatal(err)
	}
}

// step runs one round: every cluster, every member, the kubelet, the garbage
// collector. Errors of a dead operator restart it.
func (h *harness) step() {
	ctx := context.Background()
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.c.List(ctx, clusters)
	for _, c := range clusters.Items {
		_, _ = h.cluster.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	members := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(ctx, members)
	for _, m := range members.Items {
		_, _ = h.member.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	if h.life.Ended() {
		h.restart(0)
	}
	h.kubelet()
	h.collectGarbage()
	h.clock.Step(time.Second)
}

// run steps until done reports true, or fails the test.
func (h *harness) run(what string, done func() bool) {
	h.t.Helper()
	for i := 0; i < 300; i++ {
		h.step()
		if done() {
			return
		}
	}
	h.t.Fatalf("%s: no convergence\n%s", what, h.dump())
}

// kubelet stands in for nodes: it starts each member Pod in the fake etcd as
// etcd would (bootstrap with "new", join with "existing") and marks it Ready.
func (h *harness) kubelet() {
	ctx := context.Background()
	pods := &corev1.PodList{}
	_ = h.c.List(ctx, pods)
	for i := range pods.Items {
		p := &pods.Items[i]
		if isReady(p) || h.broken[p.Name] || unschedulable(p) {
			continue
		}
		if err := h.startEtcd(p); err != nil {
			continue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: build.EtcdContainer, Ready: true}}
		if err := h.c.Status().Update(ctx, p); err != nil {
			h.t.Logf("kubelet: %v", err)
		}
	}
}

func (h *harness) startEtcd(p *corev1.Pod) error {
	flags := map[string]string{}
	for _, a := range p.Spec.Containers[0].Command {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	name, peer, clientURL := flags["--name"], flags["--initial-advertise-peer-urls"], flags["--advertise-client-urls"]
	if p.Annotations[build.AnnotationInitialClusterState] == build.StateNew && !h.hasPeer(peer) {
		h.etcd.Bootstrap(name, peer, clientURL)
		return nil
	}
	if err := h.etcd.Start(peer, name, clientURL); err != nil {
		return err
	}
	h.etcd.CatchUp(peer)
	return nil
}

func (h *harness) hasPeer(url string) bool {
	for _, m := range h.etcd.Members() {
		for _, u := range m.PeerURLs {
			if u == url {
				return true
			}
		}
	}
	return false
}

// collectGarbage deletes what owner references would: Pods and PVCs of gone
// members (stopping their etcd), members of gone clusters.
func (h *harness) collectGarbage() {
	ctx := context.Background()
	members := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(ctx, members)
	alive := map[types.UID]bool{}
	for _, m := range members.Items {
		alive[m.UID] = true
	}
	pods := &corev1.PodList{}
	_ = h.c.List(ctx, pods)
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && !alive[ref.UID] {
			_ = h.c.Delete(ctx, p)
		}
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = h.c.List(ctx, pvcs)
	for i := range pvcs.Items {
		if ref := metav1.GetControllerOf(&pvcs.Items[i]); ref != nil && !alive[ref.UID] {
			_ = h.c.Delete(ctx, &pvcs.Items[i])
		}
	}
	h.stopDeadPods()
}

// stopDeadPods takes the etcd of members whose Pod is gone off the fake
// network.
func (h *harness) stopDeadPods() {
	ctx := context.Background()
	pods := &corev1.PodList{}
	_ = h.c.List(ctx, pods)
	running := map[string]bool{}
	for _, p := range pods.Items {
		running[p.Name] = true
	}
	for _, m := range h.etcd.Members() {
		if m.Name != "" && !running[m.Name] && len(m.PeerURLs) > 0 {
			h.etcd.SetUp(m.PeerURLs[0], false)
		}
	}
}

// unschedulable: the stand-in's nodes have no labels, so a required node
// affinity never matches.
func unschedulable(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (h *harness) getCluster(name string) *v1alpha2.EtcdCluster {
	h.t.Helper()
	c := &v1alpha2.EtcdCluster{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) members(cluster string) []v1alpha2.EtcdMember {
	list := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(context.Background(), list, client.MatchingLabels{build.LabelCluster: cluster})
	return list.Items
}

// converged: the cluster reached its target, and etcd's membership is exactly
// the running members, all voters.
func (h *harness) converged(name string, want int) func() bool {
	return func() bool {
		c := h.getCluster(name)
		cond := conditions.Get(c.Status.Conditions, conditions.Progressing)
		if cond == nil || cond.Reason != conditions.ReasonReconciled || c.Status.ReadyMembers != int32(want) {
			return false
		}
		return h.etcdMatches(name) == nil
	}
}

// etcdMatches checks that etcd lists exactly the running members, as voters.
func (h *harness) etcdMatches(name string) error {
	var running []string
	for _, m := range h.members(name) {
		if m.DeletionTimestamp == nil && !m.Spec.Dormant {
			running = append(running, build.PeerURL(&m))
		}
	}
	em := h.etcd.Members()
	if len(em) != len(running) {
		return fmt.Errorf("etcd has %d members, %d EtcdMembers run", len(em), len(running))
	}
	for _, m := range em {
		if m.IsLearner {
			return fmt.Errorf("etcd member %x is still a learner", m.ID)
		}
		found := false
		for _, u := range running {
			found = found || m.PeerURLs[0] == u
		}
		if !found {
			return fmt.Errorf("stray etcd member %x %v", m.ID, m.PeerURLs)
		}
	}
	return nil
}

func (h *harness) dump() string {
	var b strings.Builder
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.c.List(context.Background(), clusters)
	for _, c := range clusters.Items {
		fmt.Fprintf(&b, "cluster %s: id=%s ready=%d deadline=%v observed=%+v\n", c.Name, c.Status.ClusterID, c.Status.ReadyMembers, c.Status.ProgressDeadline, c.Status.Observed)
		for _, cond := range c.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		for _, m := range h.members(c.Name) {
			fmt.Fprintf(&b, "  member %s voter=%t dormant=%t deleting=%t initial=%q id=%s\n", m.Name, m.Status.IsVoter, m.Spec.Dormant, m.DeletionTimestamp != nil, m.Spec.InitialCluster, m.Status.MemberID)
			for _, cond := range m.Status.Conditions {
				fmt.Fprintf(&b, "    %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	fmt.Fprintf(&b, "etcd:\n%s", h.etcd.String())
	return b.String()
}
