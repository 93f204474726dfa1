// Package daemon is the long-running half of a sandbox: `sandbox up`
// starts it detached. It supervises the control plane, runs the nodes, the
// storage provisioner and the DNS writer in-process, and serves the control
// API on D/control.sock.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed74754924/etcd-operator/internal/sandbox/controlplane"
	"github.com/seed74754924/etcd-operator/internal/sandbox/dns"
	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
	"github.com/seed74754924/etcd-operator/internal/sandbox/node"
	"github.com/seed74754924/etcd-operator/internal/sandbox/storage"
)

// Options configure a daemon.
type Options struct {
	Instance   *instance.Instance
	ToolsBin   string
	Binary     string
	MaxBackoff time.Duration
}

// Daemon is one running sandbox.
type Daemon struct {
	opts     Options
	in       *instance.Instance
	cp       *controlplane.ControlPlane
	client   kubernetes.Interface
	nodes    []*node.Node
	images   *images.Registry
	storage  *storage.Provisioner
	ready    atomic.Bool
	setupErr atomic.Value // string
	stop     chan struct{}
	stopOnce sync.Once
}

// Run runs the daemon until SIGTERM or a shutdown request, then stops the
// Pods and the control plane.
func Run(opts Options) error {
	in := opts.Instance
	lock, err := lockDir(in)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.WriteFile(in.PIDFile(), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	d := &Daemon{opts: opts, in: in, stop: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-sigs:
			d.Shutdown()
		case <-ctx.Done():
		}
	}()
	srv, err := d.serveControl()
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := d.setup(ctx); err != nil {
		slog.Error("Sandbox setup failed; waiting for `sandbox down`", "err", err)
		d.setupErr.Store(err.Error())
	}
	<-d.stop
	slog.Info("Shutting down: stopping Pods, then the control plane")
	d.teardown()
	return nil
}

// lockDir makes sure one daemon at most runs per directory.
func lockDir(in *instance.Instance) (*os.File, error) {
	f, err := os.OpenFile(in.Path("daemon.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another sandbox daemon runs in %s", in.Dir)
	}
	return f, nil
}

// Shutdown asks Run to stop.
func (d *Daemon) Shutdown() { d.stopOnce.Do(func() { close(d.stop) }) }

func (d *Daemon) setup(ctx context.Context) error {
	in := d.in
	start := time.Now()
	if err := netns.EnsureBridge(ctx, in.BridgeName(), prefix16(in)); err != nil {
		return fmt.Errorf("creating bridge %s: %w", in.BridgeName(), err)
	}
	if err := controlplane.WritePKI(in); err != nil {
		return fmt.Errorf("writing certificates: %w", err)
	}
	cp, err := controlplane.Start(ctx, in, controlplane.Options{ToolsBin: d.opts.ToolsBin})
	if err != nil {
		return err
	}
	d.cp = cp
	slog.Info("Control plane is up", "after", time.Since(start).Round(time.Millisecond))
	cfg, err := clientcmd.BuildConfigFromFlags("", in.Kubeconfig())
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	if d.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := d.startWorld(ctx); err != nil {
		return err
	}
	if err := d.waitNodesReady(ctx); err != nil {
		return err
	}
	d.ready.Store(true)
	slog.Info("Sandbox is ready", "after", time.Since(start).Round(time.Millisecond), "nodes", len(d.nodes))
	return nil
}

// prefix16 is the bridge's address with the Pod CIDR's length.
func prefix16(in *instance.Instance) netip.Prefix {
	return netip.PrefixFrom(in.BridgeIP(), in.PodCIDR.Bits())
}

// startWorld starts informers, images, DNS, storage and the nodes.
func (d *Daemon) startWorld(ctx context.Context) error {
	in := d.in
	f := informers.NewSharedInformerFactory(d.client, 0)
	pods, secrets, cms := f.Core().V1().Pods(), f.Core().V1().Secrets(), f.Core().V1().ConfigMaps()
	pvcs, pvs, svcs := f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes(), f.Core().V1().Services()
	eps := f.Discovery().V1().EndpointSlices()
	toolsRoot := filepath.Dir(d.opts.ToolsBin)
	d.images = images.NewRegistry(in.Path("images.json"))
	builtins, err := images.Builtins(toolsRoot)
	if err != nil {
		return err
	}
	if err := d.images.Add(builtins...); err != nil {
		return err
	}
	hosts := dns.NewWriter(pods.Lister(), svcs.Lister(), eps.Lister(), in.BridgeIP().String())
	d.storage = &storage.Provisioner{Client: d.client, PVCs: pvcs.Lister(), PVs: pvs.Lister(), Dir: in.Path("volumes")}
	d.storage.Init()
	if err := d.storage.EnsureClasses(ctx); err != nil {
		return err
	}
	veths := &atomic.Uint64{}
	for i := range in.Nodes {
		d.nodes = append(d.nodes, node.New(node.Config{
			Instance: in, Client: d.client, Pods: pods.Lister(), Secrets: secrets.Lister(), ConfigMaps: cms.Lister(),
			PVCs: pvcs.Lister(), PVs: pvs.Lister(), Images: d.images, Hosts: hosts, CA: mustCA(in),
			Binary: d.opts.Binary, MaxBackoff: d.opts.MaxBackoff, Veths: veths, KubeletVersion: d.kubeletVersion(),
		}, i))
	}
	d.handleEvents(pods.Informer(), svcs.Informer(), eps.Informer(), pvcs.Informer(), pvs.Informer(), hosts)
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	go hosts.Run(ctx)
	go d.storage.Run(ctx)
	for _, n := range d.nodes {
		if err := n.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (d *Daemon) handleEvents(pods, svcs, eps, pvcs, pvs cache.SharedIndexInformer, hosts *dns.Writer) {
	onPod := func(obj any, deleted bool) {
		pod, ok := podOf(obj)
		if !ok {
			return
		}
		hosts.Trigger()
		for _, n := range d.nodes {
			if n.Name() != pod.Spec.NodeName {
				continue
			}
			if deleted {
				n.PodDeleted(pod)
			} else {
				n.PodChanged(pod)
			}
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onPod(obj, false) },
		UpdateFunc: func(_, obj any) { onPod(obj, false) },
		DeleteFunc: func(obj any) { onPod(obj, true) },
	})
	trigger := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { hosts.Trigger() },
		UpdateFunc: func(any, any) { hosts.Trigger() },
		DeleteFunc: func(any) { hosts.Trigger() },
	}
	_, _ = svcs.AddEventHandler(trigger)
	_, _ = eps.AddEventHandler(trigger)
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	_, _ = pvcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.storage.ClaimChanged(key(obj)) },
		UpdateFunc: func(_, obj any) { d.storage.ClaimChanged(key(obj)) },
	})
	_, _ = pvs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.storage.VolumeChanged(key(obj)) },
		UpdateFunc: func(_, obj any) { d.storage.VolumeChanged(key(obj)) },
		DeleteFunc: func(obj any) { d.storage.VolumeChanged(key(obj)) },
	})
}

func podOf(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// waitNodesReady returns once the API shows every node Ready.
func (d *Daemon) waitNodesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil && countReady(list.Items) >= len(d.nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("nodes did not become Ready within 2 minutes")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func countReady(nodes []corev1.Node) int {
	n := 0
	for _, node := range nodes {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// teardown stops the Pods (removing their namespaces and mounts), then the
// control plane, then the bridge.
func (d *Daemon) teardown() {
	var wg sync.WaitGroup
	for _, n := range d.nodes {
		wg.Go(n.Shutdown)
	}
	wg.Wait()
	if d.cp != nil {
		d.cp.Stop()
	}
	_ = netns.DeleteLink(context.Background(), d.in.BridgeName())
	_ = os.Remove(d.in.PIDFile())
}

func (d *Daemon) nodeByName(name string) (*node.Node, error) {
	for _, n := range d.nodes {
		if n.Name() == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node named %q", name)
}
