package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	clusterctrl "github.com/seed74754924/etcd-operator/internal/controller/cluster"
	defragctrl "github.com/seed74754924/etcd-operator/internal/controller/defrag"
	memberctrl "github.com/seed74754924/etcd-operator/internal/controller/member"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/secretcache"
	etcdfake "github.com/seed74754924/etcd-operator/test/infra/etcd/fake"
	"github.com/seed74754924/etcd-operator/test/infra/faults"
)

const ns = "default"

// operatorImage holds the join gate: joining members' Pods start before the
// add (see package join).
const operatorImage = "etcd-operator:test"

// harness runs both controllers against a fake API server and a fake etcd
// that refuses what etcd refuses, with a kubelet stand-in that starts member
// Pods in the fake etcd and reports readiness the way etcd's health endpoint
// would. Every reconcile error fails the test (but the injected crash), and
// every membership change the operator makes is checked against the ground
// truth of the fake etcd (see invariants_test.go).
type harness struct {
	t *testing.T
	// mayAskRemoved: the test removes members the operator cannot know
	// of (by hand, or just before the operator process is killed), so a
	// status call may reach one that applied its removal, as it would on
	// etcd (which then stops that member, as it stops itself anyway).
	mayAskRemoved bool
	c             client.Client
	raw           client.WithWatch
	etcd          *etcdfake.Cluster
	clock         *clocktesting.FakeClock

	cluster *clusterctrl.Reconciler
	member  *memberctrl.Reconciler
	defrag  *defragctrl.Reconciler
	events  *recorder

	// Crash injection: a life started by restart(k) ends after k mutating
	// calls (API writes and etcd changes); every later call fails until the
	// next restart builds new controllers, as a new process would.
	life      *faults.Life
	mutations int
	crashed   bool
	uids      int

	// restoreFails makes every restore from a source whose rendering
	// holds it fail in its init container, as the agent fails on a
	// snapshot etcdutl refuses.
	restoreFails string
	// broken names Pods whose etcd the kubelet will not start; with
	// breakAll it starts none that is not running already.
	broken   map[string]bool
	breakAll bool
	// budgetAllows is each budget's status (disruptions allowed), as the
	// disruption controller last computed it; evictions and
	// evictionsRefused count the Eviction API's answers; cordoned nodes
	// get no new Pods.
	budgetAllows                map[string]int
	evictions, evictionsRefused int
	cordoned                    map[string]bool
	// afterCluster, if set, runs in each step right after the cluster
	// controller's passes, before anything else reacts (a user racing the
	// operator).
	afterCluster func()
	// statusDelay holds the member controller's status writes back for
	// that many steps: the cluster controller then decides on stale member
	// status, as it would behind a slow member controller.
	statusDelay int
	delayed     []delayedWrite
	// staleClusterReads makes the cluster controller's first read of a
	// cluster after each of its status writes return the cluster as it was
	// before the write: a cache that has not caught up with the write.
	staleClusterReads bool
	staleCluster      map[string]*v1alpha2.EtcdCluster
	// staleMemberReads makes the cluster controller's next list of members
	// still hold each member it releases, and its next read of a Pod it
	// deletes still find the Pod: a cache one event behind its own writes.
	staleMemberReads bool
	staleMembers     map[string]*v1alpha2.EtcdMember
	stalePods        map[string]*corev1.Pod
	stepNo           int
	// probeFails names Pods whose readiness probe fails although their
	// etcd runs (the kubelet cannot reach it, say).
	probeFails map[string]bool
	// wiped names members whose data directory was emptied; volumes
	// records the claim each member's etcd first started on.
	wiped   map[string]bool
	volumes map[string]types.UID
	// wipedUnder is the leader when each member was wiped.
	wipedUnder map[string]uint64
	// startErrors keeps why etcd refused to start a Pod's member.
	startErrors map[string]string
	// damaged names members whose data directory etcd cannot start on
	// (see damageData).
	damaged map[string]damage
	// forced counts, by Pod name, the starts of etcd with
	// --force-new-cluster.
	forced map[string]int
	// guardSawLog records the Pods in which the data guard saw etcd's log
	// (its mark in the Pod's state directory).
	guardSawLog map[types.UID]bool
	// failFirstJoins makes the first starts of each joining member's etcd
	// exit before it writes its log (its peers not reachable yet), that
	// many times; failedJoins counts them by Pod name.
	failFirstJoins int
	failedJoins    map[string]int
	// ips numbers the Pod addresses the stand-in hands out.
	ips int
	// podsSeen records every Pod UID the kubelet saw, by Pod name.
	podsSeen map[string]map[types.UID]bool
	// nodes is the stand-in's node of each Pod; downNodes stop everything.
	nodes     map[string]string
	nextNode  int
	downNodes map[string]bool
	// calls records the operator's etcd membership calls, in order.
	calls []string
	// podWrites counts the operator's writes (patch, update) of each Pod,
	// by name.
	podWrites map[string]int
	// allowErrors lets a test accept reconcile errors it provokes.
	allowErrors bool
	// checkClientEndpoints checks at every step that the client Service
	// routes to voters only.
	checkClientEndpoints bool

	// callMu serialises the operator's etcd membership calls and their
	// checks when reconciles run at once; gate* is the barrier that makes
	// them arrive at once.
	callMu      sync.Mutex
	gate        sync.Mutex
	gateWant    int
	gateArrived int
	gateOpen    chan struct{}
}

var nodeNames = []string{"node-0", "node-1", "node-2", "node-3", "node-4"}

func newHarness(t *testing.T) *harness {
	t.Helper()
	// Only the API groups the controllers use: the fake client's tracker
	// builds a REST mapper of the whole scheme on every write, and with
	// every client-go group that was half of the suite's CPU time.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme, discoveryv1.AddToScheme,
		batchv1.AddToScheme, storagev1.AddToScheme, v1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	h := &harness{
		t: t, broken: map[string]bool{}, probeFails: map[string]bool{}, cordoned: map[string]bool{}, budgetAllows: map[string]int{}, wiped: map[string]bool{}, wipedUnder: map[string]uint64{}, volumes: map[string]types.UID{}, startErrors: map[string]string{}, forced: map[string]int{}, guardSawLog: map[types.UID]bool{}, failedJoins: map[string]int{}, podsSeen: map[string]map[types.UID]bool{},
		nodes: map[string]string{}, downNodes: map[string]bool{},
		etcd: etcdfake.New(0xc1, clk), clock: clk, events: &recorder{},
	}
	b := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&v1alpha2.EtcdCluster{}, &v1alpha2.EtcdMember{}, &v1alpha2.EtcdDefrag{}, &corev1.Pod{}, &corev1.Node{})
	for _, f := range index.Fields() {
		b = b.WithIndex(f.Object, f.Name, f.Extract)
	}
	raw := b.Build()
	// The harness itself (kubelet, garbage collector, checks) uses the raw
	// client; only the operator's calls count and can crash.
	h.c, h.raw = raw, raw
	for _, n := range nodeNames {
		h.createNode(n)
	}
	h.restart(0)
	t.Cleanup(func() {
		if asked := h.etcd.AskedRemoved(); len(asked) > 0 && !h.mayAskRemoved {
			t.Errorf("the operator asked members it had removed from etcd for their status (etcd 3.6 panics): %v", asked)
		}
	})
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
			if obj.GetName() == "" && obj.GetGenerateName() != "" {
				// Generated names in creation order, so that every run of a
				// scenario makes the same calls and a crash after call k
				// always hits the same step.
				obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), h.uids))
			}
			obj.SetCreationTimestamp(metav1.NewTime(h.clock.Now()))
			return h.count(c.Create(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			h.countPodWrite(obj)
			return h.count(c.Patch(ctx, obj, patch, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			h.countPodWrite(obj)
			return h.count(c.Update(ctx, obj, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return h.count(c.Delete(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return h.count(c.SubResource(sub).Patch(ctx, obj, patch, opts...))
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if pod, ok := obj.(*corev1.Pod); ok && sub == "eviction" {
				return h.count(h.evict(ctx, pod))
			}
			return h.count(c.SubResource(sub).Create(ctx, obj, subObj, opts...))
		},
	})
	operator := h.life.Client(counting)
	memberClient := operator
	if h.statusDelay > 0 {
		memberClient = h.delayingStatus(operator)
	}
	dial := h.life.Dialer(h.countingDialer())
	clusterClient := operator
	if h.staleClusterReads {
		clusterClient = h.staleReading(operator)
	}
	if h.staleMemberReads {
		clusterClient = h.staleMemberReading(clusterClient)
	}
	// Secrets through the operator's reader, over the harness's always
	// current store: what it keeps is new with each life, as in a restart.
	h.cluster = &clusterctrl.Reconciler{Client: clusterClient, APIReader: secretcache.New(h.raw, operator), Recorder: h.events, Dial: dial, Clock: h.clock, OperatorImage: operatorImage,
		// Names in creation order, as for generated names below.
		MemberName: func(cluster string) string { return fmt.Sprintf("%s-%05d", cluster, h.uids+1) }}
	h.member = &memberctrl.Reconciler{Client: memberClient, APIReader: secretcache.New(h.raw, memberClient), Recorder: h.events, Dial: dial, Clock: h.clock, OperatorImage: operatorImage}
	h.defrag = &defragctrl.Reconciler{Client: operator, APIReader: operator, Recorder: h.events, Dial: dial, Clock: h.clock}
}

// countPodWrite counts a write of a Pod in podWrites.
func (h *harness) countPodWrite(obj client.Object) {
	if _, ok := obj.(*corev1.Pod); !ok {
		return
	}
	if h.podWrites == nil {
		h.podWrites = map[string]int{}
	}
	h.podWrites[obj.GetName()]++
}

// staleReading wraps the cluster controller's client (staleClusterReads):
// a status write of an EtcdCluster keeps the object as it was, and the next
// read of it returns that once.
func (h *harness) staleReading(inner client.WithWatch) client.WithWatch {
	if h.staleCluster == nil {
		h.staleCluster = map[string]*v1alpha2.EtcdCluster{}
	}
	return interceptor.NewClient(inner, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*v1alpha2.EtcdCluster); ok && sub == "status" {
				before := &v1alpha2.EtcdCluster{}
				if err := h.raw.Get(ctx, client.ObjectKeyFromObject(obj), before); err == nil {
					h.staleCluster[client.ObjectKeyFromObject(obj).String()] = before
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if out, ok := obj.(*v1alpha2.EtcdCluster); ok {
				if stale := h.staleCluster[key.String()]; stale != nil {
					delete(h.staleCluster, key.String())
					stale.DeepCopyInto(out)
					return nil
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// staleMemberReading wraps the cluster controller's client
// (staleMemberReads).
func (h *harness) staleMemberReading(inner client.WithWatch) client.WithWatch {
	h.staleMembers, h.stalePods = map[string]*v1alpha2.EtcdMember{}, map[string]*corev1.Pod{}
	return interceptor.NewClient(inner, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			before := &v1alpha2.EtcdMember{}
			_, member := obj.(*v1alpha2.EtcdMember)
			held := member && h.raw.Get(ctx, client.ObjectKeyFromObject(obj), before) == nil
			err := c.Patch(ctx, obj, patch, opts...)
			if err == nil && held && len(obj.GetFinalizers()) == 0 && len(before.Finalizers) > 0 {
				h.staleMembers[before.Name] = before
			}
			return err
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			before := &corev1.Pod{}
			_, pod := obj.(*corev1.Pod)
			held := pod && h.raw.Get(ctx, client.ObjectKeyFromObject(obj), before) == nil
			err := c.Delete(ctx, obj, opts...)
			if err == nil && held {
				h.stalePods[before.Name] = before
			}
			return err
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if l, ok := list.(*v1alpha2.EtcdMemberList); ok && err == nil {
				h.addStaleMembers(l)
			}
			return err
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if out, ok := obj.(*corev1.Pod); ok && h.stalePods[key.Name] != nil {
				h.stalePods[key.Name].DeepCopyInto(out)
				delete(h.stalePods, key.Name)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// addStaleMembers puts the members released since the last list back into
// this one, once.
func (h *harness) addStaleMembers(l *v1alpha2.EtcdMemberList) {
	for name, m := range h.staleMembers {
		if !slices.ContainsFunc(l.Items, func(o v1alpha2.EtcdMember) bool { return o.Name == name }) {
			l.Items = append(l.Items, *m)
		}
		delete(h.staleMembers, name)
	}
}

// delayedWrite is a member status write held back (statusDelay).
type delayedWrite struct {
	due   int
	apply func()
}

// delayingStatus wraps the member controller's client so that its status
// writes of EtcdMembers land statusDelay steps later.
func (h *harness) delayingStatus(inner client.WithWatch) client.WithWatch {
	return interceptor.NewClient(inner, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*v1alpha2.EtcdMember); !ok || sub != "status" {
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			held := obj.DeepCopyObject().(client.Object)
			h.delayed = append(h.delayed, delayedWrite{due: h.stepNo + h.statusDelay, apply: func() {
				_ = c.SubResource(sub).Patch(context.Background(), held, patch, opts...)
			}})
			return nil
		},
	})
}

// flushDelayed applies the held status writes that are due.
func (h *harness) flushDelayed() {
	keep := h.delayed[:0]
	for _, d := range h.delayed {
		if d.due <= h.stepNo {
			d.apply()
		} else {
			keep = append(keep, d)
		}
	}
	h.delayed = keep
}

// count counts a successful mutating call.
func (h *harness) count(err error) error {
	if err == nil {
		h.mutations++
	}
	return err
}

// createCluster creates an EtcdCluster with the defaults the API server sets.
func (h *harness) createCluster(name string, replicas int32, mods ...func(*v1alpha2.EtcdCluster)) {
	h.t.Helper()
	c := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(h.clock.Now())},
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

// step runs one round: the kubelet, every member, every cluster, the garbage
// collector; then one second passes. The member controller runs before the
// cluster controller, so the cluster controller decides on fresh member
// status, as it would after the watch events of a real cluster.
func (h *harness) step() {
	h.stepNo++
	h.flushDelayed()
	h.kubelet()
	h.publishEndpoints()
	// What the kubelet reports is what the endpoints controller routes by.
	h.checkRouting()
	ctx := context.Background()
	members := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(ctx, members)
	for _, m := range members.Items {
		_, err := h.member.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		h.checkError("member "+m.Name, err)
	}
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.c.List(ctx, clusters)
	for _, c := range clusters.Items {
		_, err := h.cluster.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		h.checkError("cluster "+c.Name, err)
	}
	if h.afterCluster != nil {
		h.afterCluster()
	}
	defrags := &v1alpha2.EtcdDefragList{}
	_ = h.c.List(ctx, defrags)
	for _, d := range defrags.Items {
		_, err := h.defrag.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&d)})
		h.checkError("defrag "+d.Name, err)
	}
	// A status or budget that went stale while the operator was down is
	// what any operator leaves; they are judged once the operator ran again.
	judgeBudget := !h.life.Ended()
	if h.life.Ended() {
		h.restart(0)
	}
	h.collectGarbage()
	h.checkInvariants(judgeBudget)
	h.refreshBudgets()
	h.clock.Step(time.Second)
}

// checkError fails the test on a reconcile error, unless it is the injected
// crash or the test provokes errors.
func (h *harness) checkError(what string, err error) {
	h.t.Helper()
	if err == nil || errors.Is(err, faults.ErrDead) || h.allowErrors {
		return
	}
	h.t.Errorf("%s: unexpected reconcile error: %v", what, err)
}

// run steps until done reports true, or fails the test.
func (h *harness) run(what string, done func() bool) {
	h.t.Helper()
	for range 400 {
		h.step()
		if h.t.Failed() {
			h.t.Fatalf("%s: failed at %s\n%s", what, h.clock.Now().Format(time.TimeOnly), h.dump())
		}
		if done() {
			return
		}
	}
	h.t.Fatalf("%s: no convergence\n%s", what, h.dump())
}

// steps runs n rounds.
func (h *harness) steps(n int) {
	h.t.Helper()
	for range n {
		h.step()
	}
}

// countingDialer wraps the fake etcd so that membership changes count and
// are checked.
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
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	m, err := c.Client.MemberAddAsLearner(ctx, urls)
	c.h.record("add", urls[0], err)
	return m, c.h.count(err)
}

func (c *countingClient) MemberPromote(ctx context.Context, id uint64) error {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	err := c.Client.MemberPromote(ctx, id)
	c.h.record("promote", etcd.FormatID(id), err)
	return c.h.count(err)
}

func (c *countingClient) MemberRemove(ctx context.Context, id uint64) error {
	c.h.waitAtBarrier()
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	c.h.checkRemove(id)
	err := c.Client.MemberRemove(ctx, id)
	c.h.record("remove", etcd.FormatID(id), err)
	return c.h.count(err)
}

func (c *countingClient) MoveLeader(ctx context.Context, id uint64) error {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	err := c.Client.MoveLeader(ctx, id)
	c.h.record("move-leader", etcd.FormatID(id), err)
	return c.h.count(err)
}

func (c *countingClient) Downgrade(ctx context.Context, action etcd.DowngradeAction, version string) (string, error) {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	cv, err := c.Client.Downgrade(ctx, action, version)
	if action != etcd.DowngradeValidate {
		c.h.record(fmt.Sprintf("downgrade-%d", action), version, err)
		err = c.h.count(err)
	}
	return cv, err
}

func (c *countingClient) EnableRootAuth(ctx context.Context, password string) error {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	err := c.Client.EnableRootAuth(ctx, password)
	c.h.record("auth-enable", "root", err)
	return c.h.count(err)
}

func (c *countingClient) ChangeRootPassword(ctx context.Context, password string) error {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	err := c.Client.ChangeRootPassword(ctx, password)
	c.h.record("change-password", "root", err)
	return c.h.count(err)
}

// Defragment is recorded with whether the member led when it was asked
// (checkDefrag fails the test for a leader of several members, or a
// cluster not at rest).
func (c *countingClient) Defragment(ctx context.Context, endpoint string) error {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	c.h.checkDefrag(endpoint)
	err := c.Client.Defragment(ctx, endpoint)
	c.h.record("defrag", endpoint, err)
	return c.h.count(err)
}

func (c *countingClient) AlarmDisarm(ctx context.Context, a etcd.Alarm) ([]etcd.Alarm, error) {
	c.h.callMu.Lock()
	defer c.h.callMu.Unlock()
	out, err := c.Client.AlarmDisarm(ctx, a)
	c.h.record("disarm", a.Type, err)
	return out, c.h.count(err)
}

func (h *harness) record(op, what string, err error) {
	entry := op + " " + what
	if err != nil {
		entry += " refused: " + err.Error()
	}
	h.calls = append(h.calls, entry)
}

// recorder keeps every Event the operator emits.
type recorder struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	object, typ, reason, note string
}

func (r *recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	r.events = append(r.events, event{object: name, typ: eventtype, reason: reason, note: fmt.Sprintf(note, args...)})
}

// notes returns the messages of the Events of a reason.
func (r *recorder) notes(reason string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.reason == reason {
			out = append(out, e.object+": "+e.note)
		}
	}
	return out
}

func (h *harness) getCluster(name string) *v1alpha2.EtcdCluster {
	h.t.Helper()
	c := &v1alpha2.EtcdCluster{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// members lists the cluster's members by owner, whatever their labels.
func (h *harness) members(cluster string) []v1alpha2.EtcdMember {
	list := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(context.Background(), list, client.InNamespace(ns))
	var out []v1alpha2.EtcdMember
	for _, m := range list.Items {
		if m.Spec.ClusterName == cluster {
			out = append(out, m)
		}
	}
	return out
}

func (h *harness) memberNamed(name string) *v1alpha2.EtcdMember {
	h.t.Helper()
	m := &v1alpha2.EtcdMember{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return nil
	}
	return m
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
			running = append(running, manifest.PeerURL(&m))
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
		fmt.Fprintf(&b, "cluster %s: id=%s ready=%d deadline=%v observed.replicas=%d\n", c.Name, c.Status.ClusterID, c.Status.ReadyMembers, c.Status.ProgressDeadline, c.Status.Observed.Replicas)
		for _, cond := range c.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		for _, m := range h.members(c.Name) {
			fmt.Fprintf(&b, "  member %s voter=%t dormant=%t deleting=%t node=%s initial=%q id=%s\n", m.Name, m.Status.IsVoter, m.Spec.Dormant, m.DeletionTimestamp != nil, h.nodes[m.Name], m.Spec.InitialCluster, m.Status.MemberID)
			for _, cond := range m.Status.Conditions {
				fmt.Fprintf(&b, "    %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	fmt.Fprintf(&b, "etcd:\n%s", h.etcd.String())
	calls := h.calls
	if len(calls) > 30 {
		calls = calls[len(calls)-30:]
	}
	fmt.Fprintf(&b, "last etcd calls:\n  %s\n", strings.Join(calls, "\n  "))
	return b.String()
}
