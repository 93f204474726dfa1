// Package daemon is the long-running half of a sandbox: `sandbox up`
// starts it detached, inside the sandbox's network namespace and a private
// mount namespace. It supervises the control plane, kube-proxy and every
// node's containerd and kubelet, imports the images, runs the storage
// provisioner, deploys CoreDNS and serves the control API on
// D/control.sock.
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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/cgroups"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/controlplane"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/dns"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/namespace"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/network"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/node"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/storage"
)

// Options configure a daemon.
type Options struct {
	Instance   *instance.Instance
	ToolsBin   string
	MaxBackoff time.Duration
}

// Host tools the nodes need, from Debian's packages.
const (
	runcPath  = "/usr/sbin/runc"
	cniBinDir = "/usr/lib/cni"
)

// Daemon is one running sandbox.
type Daemon struct {
	opts     Options
	in       *instance.Instance
	cgroups  *cgroups.Host
	cp       *controlplane.ControlPlane
	client   kubernetes.Interface
	nodes    []*node.Node
	storage  *storage.Provisioner
	ready    atomic.Bool
	setupErr atomic.Value // string
	stop     chan struct{}
	stopOnce sync.Once

	imagesMu sync.Mutex
	images   []string

	// cuts are the addresses cut off per Pod ("namespace/name"), so a heal
	// lifts them even after the Pod was replaced or deleted.
	cutsMu sync.Mutex
	cuts   map[string][]netip.Addr
}

// Run runs the daemon until SIGTERM or a shutdown request, then stops the
// nodes and the control plane.
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
	if err := d.enter(); err != nil {
		return err
	}
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
	slog.Info("Shutting down: stopping the nodes, then the control plane")
	d.teardown()
	return nil
}

// enter finishes moving the daemon into the sandbox's own host: the mounts
// of its private mount namespace, its cgroup, the configuration of its
// network namespace.
func (d *Daemon) enter() error {
	if err := namespace.SetupMounts(d.in.Dir); err != nil {
		return err
	}
	cg, err := cgroups.Detect()
	if err != nil {
		return err
	}
	d.cgroups = cg
	self := "/" + d.in.CgroupName() + "/daemon"
	if err := cg.Create(self); err != nil {
		return fmt.Errorf("creating cgroup %s: %w", self, err)
	}
	if err := cg.Join(self, os.Getpid()); err != nil {
		return err
	}
	slog.Info("Entered the sandbox's namespaces and cgroup", "cgroup", self, "cgroupVersion", cg.Version())
	return network.Configure(context.Background())
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

// setup starts the control plane while the nodes' runtimes start and get
// the system images, then the kubelets, kube-proxy, storage and CoreDNS while
// the etcd images are imported, and returns once every node is Ready, DNS
// answers and every image is in.
func (d *Daemon) setup(ctx context.Context) error {
	in := d.in
	start := time.Now()
	for _, tool := range []string{runcPath, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("%s is missing: install Debian's runc and containernetworking-plugins (hack/sandbox-deps.sh)", tool)
		}
	}
	if err := controlplane.WritePKI(in); err != nil {
		return fmt.Errorf("writing certificates: %w", err)
	}
	if err := d.makeNodes(); err != nil {
		return err
	}
	builtins, err := images.Builtins(filepath.Dir(d.opts.ToolsBin))
	if err != nil {
		return err
	}
	system := slices.DeleteFunc(slices.Clone(builtins), func(t images.Tarball) bool { return !t.System })
	others := slices.DeleteFunc(slices.Clone(builtins), func(t images.Tarball) bool { return t.System })
	// The etcd images go in while the control plane and the kubelets start.
	imported := make(chan error, len(d.nodes))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.startControlPlane(gctx, start) })
	g.Go(func() error {
		// The imports outlive gctx, which ends with g.Wait.
		return d.startRuntimes(gctx, ctx, system, others, imported, start)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if err := d.startWorld(ctx); err != nil {
		return err
	}
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	for range d.nodes {
		if err := <-imported; err != nil {
			return err
		}
	}
	d.recordImages(others)
	slog.Info("Every node has the etcd images", "after", time.Since(start).Round(time.Millisecond))
	d.ready.Store(true)
	slog.Info("Sandbox is ready", "after", time.Since(start).Round(time.Millisecond), "nodes", len(d.nodes))
	return nil
}

func (d *Daemon) makeNodes() error {
	ca, err := controlplane.LoadCA(d.in)
	if err != nil {
		return err
	}
	for i := range d.in.Nodes {
		n := node.New(node.Config{
			Instance: d.in, Index: i, ToolsBin: d.opts.ToolsBin, Cgroups: d.cgroups,
			CAFile: filepath.Join(controlplane.PKIDir(d.in), "ca.crt"), Runc: runcPath, CNIBinDir: cniBinDir,
			PauseImage: images.Pause, MaxBackoff: d.opts.MaxBackoff, Env: append(os.Environ(), d.in.Marker()),
		})
		if err := n.Prepare(); err != nil {
			return err
		}
		if err := controlplane.WriteNodeCredentials(d.in, ca, i, filepath.Join(d.in.NodeDir(i), "pki")); err != nil {
			return err
		}
		d.nodes = append(d.nodes, n)
	}
	return nil
}

func (d *Daemon) startControlPlane(ctx context.Context, start time.Time) error {
	cp, err := controlplane.Start(ctx, d.in, controlplane.Options{ToolsBin: d.opts.ToolsBin})
	if err != nil {
		return err
	}
	d.cp = cp
	slog.Info("Control plane is up", "after", time.Since(start).Round(time.Millisecond))
	cfg, err := clientcmd.BuildConfigFromFlags("", d.in.Kubeconfig())
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	d.client, err = kubernetes.NewForConfig(cfg)
	return err
}

// startRuntimes starts every node's containerd and imports the system
// images into it, the nodes side by side; each node then goes on importing
// the other images on its own, reporting to imported when done.
func (d *Daemon) startRuntimes(ctx, importCtx context.Context, system, others []images.Tarball, imported chan<- error, start time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range d.nodes {
		g.Go(func() error {
			if err := n.StartRuntime(gctx); err != nil {
				return err
			}
			if err := importInto(gctx, n, system); err != nil {
				return err
			}
			go func() { imported <- importInto(importCtx, n, others) }()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	d.recordImages(system)
	slog.Info("Node runtimes are up with the system images", "after", time.Since(start).Round(time.Millisecond))
	return nil
}

func importInto(ctx context.Context, n *node.Node, tarballs []images.Tarball) error {
	for _, t := range tarballs {
		if err := n.Import(ctx, t.File); err != nil {
			return fmt.Errorf("node %s: importing %s: %w", n.Name(), t.File, err)
		}
	}
	return nil
}

func (d *Daemon) recordImages(tarballs []images.Tarball) {
	for _, t := range tarballs {
		d.addImages(t.Refs...)
	}
}

// startWorld starts the kubelets, kube-proxy, the storage provisioner and
// CoreDNS.
func (d *Daemon) startWorld(ctx context.Context) error {
	for _, n := range d.nodes {
		if err := n.StartKubelet(); err != nil {
			return err
		}
	}
	if err := d.cp.StartProxy(d.in, controlplane.Options{ToolsBin: d.opts.ToolsBin}); err != nil {
		return err
	}
	var err error
	if d.storage, err = storage.Start(ctx, d.client, d.in.Path("volumes")); err != nil {
		return err
	}
	ref, err := images.CoreDNS(filepath.Dir(d.opts.ToolsBin))
	if err != nil {
		return err
	}
	return dns.Deploy(ctx, d.client, ref, d.in.DNSServiceIP().String())
}

// waitReady returns once the API shows every node Ready and CoreDNS serves.
func (d *Daemon) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		list, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			ready = countReady(list.Items)
		}
		last = fmt.Sprintf("%d of %d nodes Ready", ready, len(d.nodes))
		if ready >= len(d.nodes) {
			ok, err := dns.Ready(ctx, d.client)
			if ok {
				return nil
			}
			last += fmt.Sprintf(", CoreDNS not ready (%v)", err)
		}
		select {
		case <-ctx.Done():
			return errors.New("the sandbox did not become ready within 3 minutes: " + last)
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

// teardown stops the nodes (their kubelets, containers and containerd),
// then the control plane. What is left (shims, a cgroup, the namespaces)
// goes with `sandbox down`.
func (d *Daemon) teardown() {
	var wg sync.WaitGroup
	for _, n := range d.nodes {
		wg.Go(n.Shutdown)
	}
	wg.Wait()
	if d.cp != nil {
		d.cp.Stop()
	}
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

func (d *Daemon) addImages(refs ...string) {
	d.imagesMu.Lock()
	defer d.imagesMu.Unlock()
	for _, r := range refs {
		if !slices.Contains(d.images, r) {
			d.images = append(d.images, r)
		}
	}
}
