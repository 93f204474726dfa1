package kubectletcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/portforward"
)

// fakeEtcd is an etcd cluster as the plugin sees it through its members'
// Pods: each member answers only through the port forwarded to its own Pod.
type fakeEtcd struct {
	mu        sync.Mutex
	clusterID uint64
	members   []*fakeMember
	alarms    []etcd.Alarm
	revision  int64
	compacted int64
	// user and password, when set, are required of every call.
	user, password string
	defrags        int // defragmentations so far, to order them
	snapshot       []byte
	corrupt        bool // the snapshot stream's checksum is wrong
	// unhealthyFor refuses this many membership changes as etcd does
	// right after a change, before every voter has been connected a while.
	unhealthyFor int
	nextID       uint64
}

type fakeMember struct {
	etcd.Member
	down        bool // its Pod runs but etcd does not answer
	leader      uint64
	term        uint64
	applied     uint64
	dbSize      int64
	inUse       int64
	version     string
	defraggedAt int // the defragmentation's turn, 0 when never
}

func newFakeEtcd(names ...string) *fakeEtcd {
	e := &fakeEtcd{clusterID: 0xc1, revision: 100, nextID: 0xa0, snapshot: []byte("backend bytes of a small database")}
	for i, n := range names {
		id := uint64(0x10 + i)
		e.members = append(e.members, &fakeMember{
			Member: etcd.Member{ID: id, Name: n, PeerURLs: []string{"http://" + n + ".c.ns.svc:2380"}, ClientURLs: []string{"http://" + n + ".c.ns.svc:2379"}},
			leader: 0x10, term: 2, applied: 50 + uint64(i), dbSize: 8 << 20, inUse: 2 << 20, version: "3.6.16",
		})
	}
	return e
}

func (e *fakeEtcd) member(name string) *fakeMember {
	for _, m := range e.members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// fakeEnv is the Kubernetes side: objects, a forwarder that hands out one
// local port per Pod, and a dialer that connects a port to its Pod's member.
type fakeEnv struct {
	etcd *fakeEtcd
	kube client.Client
	// api is the fake API server behind kube, which tests may wrap.
	api client.WithWatch
	// onTerminal runs the plugin as if stderr were a terminal.
	onTerminal bool
	mu         sync.Mutex
	ports      map[int]string // local port → Pod
	refuse     map[string]bool
	dialled    []etcd.Config
	// logs are the containers' logs, by namespace/pod/container (with
	// "/previous" for a previous run's); what has none is refused as the
	// API server refuses it.
	logs map[string]string
	// logOpts are the options each log was asked with.
	logOpts []corev1.PodLogOptions
}

func newFakeEnv(t *testing.T, e *fakeEtcd, objs ...client.Object) *fakeEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// EtcdDefrag has a status subresource, as its CRD does: the plugin's
	// writes cannot set a status, and the simulated controller's must go
	// through Status().
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha2.EtcdDefrag{}).Build()
	return &fakeEnv{
		etcd:   e,
		kube:   api,
		api:    api,
		ports:  map[int]string{},
		refuse: map[string]bool{},
	}
}

func (f *fakeEnv) Forward(_ context.Context, pod *corev1.Pod, port int) (int, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse[pod.Name] {
		return 0, nil, fmt.Errorf("%w: pod %s: pods %q is forbidden", portforward.ErrPortForward, pod.Name, pod.Name)
	}
	if port != manifest.ClientPort {
		return 0, nil, fmt.Errorf("unexpected port %d", port)
	}
	local := 30000 + len(f.ports)
	f.ports[local] = pod.Name
	return local, func() {}, nil
}

func (f *fakeEnv) dial(ctx context.Context, cfg etcd.Config) (etcd.Maintenance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dialled = append(f.dialled, cfg)
	pod, err := f.podAt(cfg.Endpoints[0])
	if err != nil {
		return nil, err
	}
	// clientv3 authenticates a user as it connects, through raft: a learner
	// refuses (the real dialer then tries cfg.LoginVia).
	if cfg.Username != "" {
		_, err := etcd.Login(ctx, cfg, func(_ context.Context, ep string) (string, error) {
			pod, err := f.podAt(ep)
			switch {
			case err != nil:
				return "", err
			case f.etcd.member(pod) != nil && f.etcd.member(pod).IsLearner:
				return "", errors.New("etcdserver: rpc not supported for learner")
			case cfg.Username != f.etcd.user || cfg.Password != f.etcd.password:
				return "", errors.New("etcdserver: authentication failed, invalid user ID or password")
			}
			return "token", nil
		})
		if err != nil {
			return nil, err
		}
	}
	return &fakeClient{e: f.etcd, pod: pod, cfg: cfg}, nil
}

// podAt is the Pod forwarded to an endpoint's port.
func (f *fakeEnv) podAt(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	port, _ := strconv.Atoi(u.Port())
	pod, ok := f.ports[port]
	if !ok {
		return "", fmt.Errorf("nothing forwarded to port %d", port)
	}
	return pod, nil
}

func (f *fakeEnv) deps() deps {
	return deps{kube: f.kube, namespace: "ns", forwarder: f, dial: f.dial, logs: f.podLog}
}

func (f *fakeEnv) podLog(_ context.Context, ns, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logOpts = append(f.logOpts, *opts)
	key := ns + "/" + pod + "/" + opts.Container
	if opts.Previous {
		key += "/previous"
	}
	text, ok := f.logs[key]
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q has no log", opts.Container, pod))
	}
	return []byte(text), nil
}

// app is the plugin wired to the fake; it reads no kubeconfig.
func (f *fakeEnv) app() *app {
	return &app{
		version:   "v1.2.3-test",
		connect:   func() (deps, error) { return f.deps(), nil },
		terminal:  func(io.Writer) bool { return f.onTerminal },
		pollEvery: time.Millisecond,
	}
}

// run runs the plugin with args and returns its exit code and output.
func (f *fakeEnv) run(args ...string) (code int, stdout, stderr string) {
	return runApp(f.app(), args...)
}

func runApp(a *app, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = a.execute(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

type fakeClient struct {
	e   *fakeEtcd
	pod string
	cfg etcd.Config
}

var _ etcd.Maintenance = (*fakeClient)(nil)

// self is the member behind this client's Pod, if it answers and the
// client's user may make the call. As etcd does, the member list and a
// member's status are told to anyone; the rest needs the user.
func (c *fakeClient) self() (*fakeMember, error) { return c.member(true) }

func (c *fakeClient) anyone() (*fakeMember, error) { return c.member(false) }

func (c *fakeClient) member(needsUser bool) (*fakeMember, error) {
	m := c.e.member(c.pod)
	if m == nil || m.down {
		return nil, fmt.Errorf("rpc error: connection refused to %s: %w", c.pod, context.DeadlineExceeded)
	}
	if needsUser && c.e.user != "" && c.cfg.Username == "" {
		return nil, fmt.Errorf("%w: etcdserver: user name is empty", etcd.ErrAuthRequired)
	}
	return m, nil
}

func (c *fakeClient) lock() func() { c.e.mu.Lock(); return c.e.mu.Unlock }

func (c *fakeClient) MemberList(context.Context) (*etcd.MemberList, error) {
	defer c.lock()()
	if _, err := c.anyone(); err != nil {
		return nil, err
	}
	out := &etcd.MemberList{ClusterID: c.e.clusterID}
	for _, m := range c.e.members {
		out.Members = append(out.Members, m.Member)
	}
	return out, nil
}

// refuseChange is etcd's strict reconfiguration check.
func (c *fakeClient) refuseChange() error {
	if c.e.unhealthyFor > 0 {
		c.e.unhealthyFor--
		return fmt.Errorf("%w: etcdserver: unhealthy cluster", etcd.ErrUnhealthy)
	}
	return nil
}

func (c *fakeClient) add(peerURLs []string, learner bool) (*etcd.Member, error) {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return nil, err
	}
	if err := c.refuseChange(); err != nil {
		return nil, err
	}
	for _, m := range c.e.members {
		if slices.Contains(m.PeerURLs, peerURLs[0]) {
			return nil, etcd.ErrPeerURLExists
		}
	}
	c.e.nextID++
	m := &fakeMember{Member: etcd.Member{ID: c.e.nextID, PeerURLs: peerURLs, IsLearner: learner}}
	c.e.members = append(c.e.members, m)
	return &m.Member, nil
}

func (c *fakeClient) MemberAddAsLearner(_ context.Context, peerURLs []string) (*etcd.Member, error) {
	return c.add(peerURLs, true)
}

func (c *fakeClient) MemberAdd(_ context.Context, peerURLs []string) (*etcd.Member, error) {
	return c.add(peerURLs, false)
}

func (c *fakeClient) MemberPromote(_ context.Context, id uint64) error {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return err
	}
	for _, m := range c.e.members {
		if m.ID == id {
			m.IsLearner = false
			return nil
		}
	}
	return etcd.ErrMemberNotFound
}

func (c *fakeClient) MemberRemove(_ context.Context, id uint64) error {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return err
	}
	if err := c.refuseChange(); err != nil {
		return err
	}
	i := slices.IndexFunc(c.e.members, func(m *fakeMember) bool { return m.ID == id })
	if i < 0 {
		return etcd.ErrMemberNotFound
	}
	self := c.e.members[i].Name == c.pod
	c.e.members = slices.Delete(c.e.members, i, i+1)
	if self {
		// A member applying its own removal stops before it answers.
		return errors.New("etcdserver: server stopped")
	}
	return nil
}

func (c *fakeClient) Status(context.Context, string) (*etcd.Status, error) {
	defer c.lock()()
	m, err := c.anyone()
	if err != nil {
		return nil, err
	}
	return &etcd.Status{
		ClusterID: c.e.clusterID, MemberID: m.ID, Leader: m.leader, RaftTerm: m.term, RaftIndex: m.applied + 1,
		RaftAppliedIndex: m.applied, IsLearner: m.IsLearner, Version: m.version, DBSize: m.dbSize, DBSizeInUse: m.inUse,
	}, nil
}

func (c *fakeClient) MoveLeader(_ context.Context, to uint64) error {
	defer c.lock()()
	m, err := c.self()
	if err != nil {
		return err
	}
	if m.leader != m.ID {
		return etcd.ErrNotLeader
	}
	for _, o := range c.e.members {
		o.leader = to
		o.term++
	}
	return nil
}

func (c *fakeClient) AuthEnabled(context.Context) (bool, error) { return c.e.user != "", nil }

func (c *fakeClient) EnableRootAuth(context.Context, string) error {
	return errors.New("not used by the plugin")
}

func (c *fakeClient) ChangeRootPassword(context.Context, string) error {
	return errors.New("not used by the plugin")
}

func (c *fakeClient) ClusterVersion(context.Context, string) (string, error) {
	return "", errors.New("not used by the plugin")
}

func (c *fakeClient) Health(context.Context, string) error {
	return errors.New("not used by the plugin")
}

func (c *fakeClient) Downgrade(context.Context, etcd.DowngradeAction, string) (string, error) {
	return "", errors.New("not used by the plugin")
}

func (c *fakeClient) Close() error { return nil }

func (c *fakeClient) Defragment(context.Context, string) error {
	defer c.lock()()
	m, err := c.self()
	if err != nil {
		return err
	}
	c.e.defrags++
	m.defraggedAt = c.e.defrags
	m.dbSize = m.inUse
	return nil
}

func (c *fakeClient) Compact(context.Context, string) (int64, error) {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return 0, err
	}
	if c.e.compacted == c.e.revision {
		return c.e.revision, fmt.Errorf("%w: %d", etcd.ErrCompacted, c.e.revision)
	}
	c.e.compacted = c.e.revision
	return c.e.revision, nil
}

func (c *fakeClient) AlarmList(context.Context) ([]etcd.Alarm, error) {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return nil, err
	}
	return slices.Clone(c.e.alarms), nil
}

func (c *fakeClient) AlarmDisarm(_ context.Context, a etcd.Alarm) ([]etcd.Alarm, error) {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return nil, err
	}
	var cleared, kept []etcd.Alarm
	for _, x := range c.e.alarms {
		if a == (etcd.Alarm{}) || a == x {
			cleared = append(cleared, x)
		} else {
			kept = append(kept, x)
		}
	}
	c.e.alarms = kept
	return cleared, nil
}

func (c *fakeClient) Snapshot(context.Context) (io.ReadCloser, error) {
	defer c.lock()()
	if _, err := c.self(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(c.e.snapshot)
	if c.e.corrupt {
		sum[0]++
	}
	return io.NopCloser(bytes.NewReader(append(slices.Clone(c.e.snapshot), sum[:]...))), nil
}

// Kubernetes objects.

func cluster(name string, mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       v1alpha2.EtcdClusterSpec{Replicas: ptr.To[int32](3), Version: "3.6.16"},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// memberPod is a Ready member Pod of cluster c as the operator renders it.
func memberPod(c, name string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: manifest.MemberLabels(c, name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:    manifest.EtcdContainer,
			Command: []string{"etcd", "--name=" + name, "--advertise-client-urls=http://" + name + "." + c + ".ns.svc:2379"},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	p.Labels[manifest.LabelRole] = manifest.RoleVoter
	for _, m := range mods {
		m(p)
	}
	return p
}

func notReadyPod(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
}

// unhealthyPod runs but fails its readiness probe, as a member with an alarm.
func unhealthyPod(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

// threeMembers is a plain cluster "c" of members a, b, c with a leading.
func threeMembers(t *testing.T, mods ...func(*fakeEtcd)) *fakeEnv {
	t.Helper()
	e := newFakeEtcd("c-a", "c-b", "c-c")
	for _, m := range mods {
		m(e)
	}
	return newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a"), memberPod("c", "c-b"), memberPod("c", "c-c"))
}

// simulateDefragController stands in for the operator's EtcdDefrag
// controller: before each read of an EtcdDefrag, the run moves one step on,
// written through the status subresource as the controller writes it;
// steps[i] is what changed before the i-th read. Reads after the last step
// see the run as that step left it. The plugin reads, so each step is seen
// exactly once, without the test waiting on a clock.
func (f *fakeEnv) simulateDefragController(t *testing.T, steps ...func(*v1alpha2.EtcdDefrag)) {
	t.Helper()
	next := 0
	f.kube = interceptor.NewClient(f.api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isRun := obj.(*v1alpha2.EtcdDefrag); isRun && next < len(steps) {
				run := &v1alpha2.EtcdDefrag{}
				if err := c.Get(ctx, key, run); err != nil {
					return err
				}
				steps[next](run)
				next++
				// A step may delete the run, as its TTL or a person would.
				if err := c.Status().Update(ctx, run); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("the simulated controller's status write failed: %v", err)
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

// withoutDefragCRD is an API server whose operator predates EtcdDefrag: the
// client's REST mapper finds no such kind, for any verb.
func (f *fakeEnv) withoutDefragCRD() {
	noKind := func(obj runtime.Object) error {
		switch obj.(type) {
		case *v1alpha2.EtcdDefrag, *v1alpha2.EtcdDefragList:
			return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: v1alpha2.GroupVersion.Group, Kind: "EtcdDefrag"}, SearchedVersions: []string{v1alpha2.GroupVersion.Version}}
		}
		return nil
	}
	f.kube = interceptor.NewClient(f.api, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := noKind(obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := noKind(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := noKind(list); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	})
}
