// Package node is the sandbox's kubelet: each Node registers itself, keeps
// its Lease, runs the Pods bound to it as namespaced processes (see package
// container), reports their status and serves the kubelet API for logs,
// exec and port-forward.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
	"github.com/seed74754924/etcd-operator/internal/sandbox/pki"
)

// HostsRegistry keeps each Pod's /etc/hosts current (package dns).
type HostsRegistry interface {
	Register(pod *corev1.Pod, ip, path string)
	Unregister(uid types.UID)
}

// Config is what every node of a sandbox shares.
type Config struct {
	Instance   *instance.Instance
	Client     kubernetes.Interface
	Pods       corelisters.PodLister
	Secrets    corelisters.SecretLister
	ConfigMaps corelisters.ConfigMapLister
	PVCs       corelisters.PersistentVolumeClaimLister
	PVs        corelisters.PersistentVolumeLister
	Images     *images.Registry
	Hosts      HostsRegistry
	CA         *pki.CA
	// Binary is the sandbox executable, re-executed as container-init.
	Binary string
	// MaxBackoff caps CrashLoopBackOff and ImagePullBackOff (5m like the
	// kubelet unless set).
	MaxBackoff time.Duration
	// Veths numbers host-side veth names across the sandbox's nodes.
	Veths          *atomic.Uint64
	KubeletVersion string
}

// Node is one process node.
type Node struct {
	cfg      Config
	index    int
	name     string
	alloc    *netns.Allocator
	recorder record.EventRecorder

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	running bool
	cancel  context.CancelFunc
	server  *http.Server
	done    chan struct{}
}

// New returns node number index of the sandbox (not started).
func New(cfg Config, index int) *Node {
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	name := instance.NodeName(index)
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	return &Node{
		cfg:      cfg,
		index:    index,
		name:     name,
		alloc:    netns.NewAllocator(cfg.Instance.NodeCIDR(index)),
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "sandbox-kubelet", Host: name}),
		workers:  map[types.UID]*podWorker{},
	}
}

// Name is the Node's name.
func (n *Node) Name() string { return n.name }

// Running reports whether the node is started.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

// Start registers the Node, starts its heartbeats and kubelet API, and
// takes over the Pods bound to it.
func (n *Node) Start(parent context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		return nil
	}
	ctx, cancel := context.WithCancel(parent)
	if err := n.register(ctx); err != nil {
		cancel()
		return err
	}
	srv, err := n.serveKubelet()
	if err != nil {
		cancel()
		return err
	}
	n.server, n.cancel, n.running, n.done = srv, cancel, true, make(chan struct{})
	go n.heartbeat(ctx, n.done)
	n.resyncLocked(ctx)
	return nil
}

// Stop is a power cut: the Pods' processes die, the node stops
// heartbeating and serving. Pod state is kept for Start.
func (n *Node) Stop() {
	n.mu.Lock()
	if !n.running {
		n.mu.Unlock()
		return
	}
	n.running = false
	n.cancel()
	_ = n.server.Close()
	done := n.done
	workers := make([]*podWorker, 0, len(n.workers))
	for _, w := range n.workers {
		workers = append(workers, w)
	}
	n.mu.Unlock()
	<-done
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.halt)
	}
	wg.Wait()
}

// Shutdown removes every Pod's processes, network and mounts, for `down`.
func (n *Node) Shutdown() {
	n.Stop()
	n.mu.Lock()
	workers := n.workers
	n.workers = map[types.UID]*podWorker{}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.teardown(context.Background()) })
	}
	wg.Wait()
}

// PodChanged hands a Pod bound to this node to its worker.
func (n *Node) PodChanged(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return
	}
	n.dispatchLocked(pod)
}

// PodDeleted tells the worker its Pod is gone from the API.
func (n *Node) PodDeleted(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w, ok := n.workers[pod.UID]; ok && n.running {
		w.update(nil)
	}
}

func (n *Node) dispatchLocked(pod *corev1.Pod) {
	w, ok := n.workers[pod.UID]
	if !ok {
		if pod.DeletionTimestamp != nil && terminalPhase(pod.Status.Phase) {
			// Nothing of it ever ran here; only the API object is left.
			go n.deletePod(context.Background(), pod)
			return
		}
		w = newPodWorker(n, pod)
		n.workers[pod.UID] = w
		w.startLoop()
	}
	w.update(pod)
}

// resyncLocked reconciles the workers with the API after a (re)start:
// Pods deleted meanwhile are finalised, Pods still bound are run again.
func (n *Node) resyncLocked(ctx context.Context) {
	pods, err := n.cfg.Pods.List(labelsEverything())
	if err != nil {
		slog.Error("Listing Pods failed; the node picks them up from the next events", "node", n.name, "err", err)
	}
	current := map[types.UID]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName == n.name {
			current[p.UID] = p
		}
	}
	for uid, w := range n.workers {
		w.startLoop()
		if _, ok := current[uid]; !ok {
			w.update(nil)
		}
	}
	for _, p := range current {
		n.dispatchLocked(p)
	}
	_ = ctx
}

// forget drops a finished worker.
func (n *Node) forget(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.workers, uid)
}

// worker finds the running worker of ns/name.
func (n *Node) worker(ns, name string) (*podWorker, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.workers {
		if w.namespace == ns && w.name == name && !w.isFinished() {
			return w, true
		}
	}
	return nil, false
}

// deletePod finalises a Pod's deletion: grace period 0 and a UID
// precondition, so a new Pod of the same name is never deleted by mistake.
func (n *Node) deletePod(ctx context.Context, pod *corev1.Pod) {
	zero := int64(0)
	err := n.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		slog.Warn("Deleting a terminated Pod failed; it is retried on its next update", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

func (n *Node) register(ctx context.Context) error {
	in := n.cfg.Instance
	cidr := in.NodeCIDR(n.index).String()
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{
			corev1.LabelHostname: n.name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: runtime.GOARCH,
			corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", n.index), "node.kubernetes.io/instance-type": "sandbox",
		}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
	}
	nodes := n.cfg.Client.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering %s: %w", n.name, err)
	}
	return n.postStatus(ctx)
}

// postStatus writes the Node's status: addresses, the kubelet endpoint,
// capacity and a Ready condition.
func (n *Node) postStatus(ctx context.Context) error {
	nodes := n.cfg.Client.CoreV1().Nodes()
	cur, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cur.Status = n.nodeStatus(cur.Status)
	_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

func (n *Node) nodeStatus(old corev1.NodeStatus) corev1.NodeStatus {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           hostMemory(),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "sandbox node is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.cfg.Instance.BridgeIP().String()},
			{Type: corev1.NodeHostName, Address: n.name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(instance.KubeletPort(n.index))}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: n.cfg.Instance.Name + "-" + n.name, SystemUUID: n.cfg.Instance.Name + "-" + n.name,
			KernelVersion: kernelVersion(), OSImage: "etcd-operator sandbox", ContainerRuntimeVersion: "sandbox://1",
			KubeletVersion: n.cfg.KubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
		},
	}
}

// heartbeat renews the Lease every 2 s (the controller manager's grace
// period is about 12 s) and re-posts the status when the API says the node
// is not Ready, e.g. after a stop.
func (n *Node) heartbeat(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	lastStatus := time.Now()
	for {
		if err := n.renewLease(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("Renewing the node lease failed; retrying", "node", n.name, "err", err)
		}
		if time.Since(lastStatus) > 30*time.Second || !n.readyInAPI(ctx) {
			if err := n.postStatus(ctx); err == nil {
				lastStatus = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) readyInAPI(ctx context.Context) bool {
	cur, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return true // nothing to fix that a failing Get would tell
	}
	for _, c := range cur.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (n *Node) renewLease(ctx context.Context) error {
	leases := n.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	duration := int32(40)
	lease, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &n.name, LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = &n.name
	lease.Spec.LeaseDurationSeconds = &duration
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// serveKubelet starts the node's HTTPS endpoint on the bridge IP with a
// certificate from the sandbox CA; only clients with a CA-signed
// certificate (the API server) get in.
func (n *Node) serveKubelet() (*http.Server, error) {
	ip := n.cfg.Instance.BridgeIP()
	pair, err := n.cfg.CA.Issue(pki.Request{CommonName: n.name, IPs: []net.IP{net.IP(ip.AsSlice())}, DNSNames: []string{n.name}, Server: true})
	if err != nil {
		return nil, err
	}
	cert, err := pair.TLS()
	if err != nil {
		return nil, err
	}
	pool := certPool(n.cfg.CA)
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(instance.KubeletPort(n.index)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kubelet endpoint of %s: %w", n.name, err)
	}
	srv := &http.Server{
		Handler:           n.kubeletMux(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
		},
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("Kubelet endpoint stopped", "node", n.name, "err", err)
		}
	}()
	return srv, nil
}
