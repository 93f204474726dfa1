//go:build linux

// Package procnode is the integration tier's Kubernetes: a real
// kube-apiserver, kube-controller-manager and kube-scheduler, and nodes
// whose kubelet runs each container as a process of this machine instead
// of in a container runtime. Pods get their own loopback address and a
// file system of bind mounts (their image's files, their volumes, Secrets
// as files) under chroot; their names resolve through a hosts file (see
// Enter). What needs no node (membership through etcd's own protocol, the
// garbage collector, EndpointSlices, namespace deletion, the disruption
// budget's arithmetic) is proven here in a fraction of the sandbox's time;
// what needs one (node loss, drains, storage and network faults) stays on
// the sandbox.
//
// The stand-in kubelet refuses what the real one refuses: a Pod whose
// image it does not have, whose Secret or claim is missing, or whose
// container runs as a user that cannot write its volume does not start.
// Where it differs, the difference is stated: containers share the
// machine's network namespace, so a listen address without a host
// (0.0.0.0:2379, :8081) is bound to the Pod's own address instead, and
// there are no cgroups, so resource limits are not enforced.
package procnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/storage"
)

// Image is a container image the nodes can run: the files it holds, its
// entrypoint, and the environment it sets.
type Image struct {
	// Files maps a path in the image to the file of this machine it is.
	Files map[string]string
	// Entrypoint is the command when a container names none.
	Entrypoint []string
	// Env is the image's environment (NAME=value), PATH among it.
	Env []string
	// User and Group run the container when its Pod names none (root if zero).
	User, Group int64
}

// Config sets up an environment.
type Config struct {
	// Dir holds everything the environment writes; it must exist.
	Dir string
	// BinDir is the toolchain's bin directory (kube-apiserver, etcd, ...).
	BinDir string
	// CRDDirs are installed before anything starts.
	CRDDirs []string
	// Nodes is how many nodes to register (3 if zero).
	Nodes int
	// Images are the images the nodes have, by reference.
	Images map[string]Image
	// MaxBackoff caps the delay before a crashed container restarts (10s if zero).
	MaxBackoff time.Duration
}

// Env is a running environment.
type Env struct {
	cfg        Config
	api        *envtest.Environment
	restConfig *rest.Config
	kubeconfig string
	procs      []*exec.Cmd
	kubelet    *kubelet
	storage    *storage.Provisioner
	cancel     context.CancelFunc
	done       chan struct{}
}

// Up starts the control plane and the nodes. Call it inside Enter's
// namespace.
func Up(ctx context.Context, cfg Config) (*Env, error) {
	if os.Getenv(envInside) == "" {
		return nil, errors.New("procnode.Up runs inside the mount namespace of procnode.Enter")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	e := &Env{cfg: cfg, done: make(chan struct{})}
	if err := e.startAPIServer(); err != nil {
		return nil, err
	}
	if err := e.startControllers(); err != nil {
		e.Down()
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(e.restConfig)
	if err != nil {
		e.Down()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	// Claims get directories as the sandbox's do: the same provisioner,
	// StorageClasses (the default one immediate, the local one waiting for
	// the scheduler) and expansion in place.
	if e.storage, err = storage.Start(runCtx, cs, filepath.Join(cfg.Dir, "volumes")); err != nil {
		cancel()
		e.Down()
		return nil, err
	}
	e.kubelet = newKubelet(cs, cfg, e.restConfig, os.Getenv(envInside))
	if err := e.kubelet.registerNodes(ctx); err != nil {
		e.Down()
		return nil, err
	}
	e.kubelet.started = true
	go func() {
		defer close(e.done)
		e.kubelet.run(runCtx)
	}()
	return e, nil
}

func (e *Env) startAPIServer() error {
	e.api = &envtest.Environment{
		BinaryAssetsDirectory: e.cfg.BinDir,
		CRDDirectoryPaths:     e.cfg.CRDDirs,
		ErrorIfCRDPathMissing: true,
	}
	// Pods get their service account's token as kubelets see it: the
	// admission plugin adds the projected volume envtest leaves out.
	// The namespace has no default route to take an address from; the
	// kubernetes Service's endpoint is the first address of PodCIDR, which
	// no Pod gets.
	e.api.ControlPlane.GetAPIServer().Configure().
		Set("disable-admission-plugins", "").
		Set("enable-admission-plugins", "ServiceAccount").
		Set("advertise-address", apiServerAddress)
	cfg, err := e.api.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	e.restConfig = cfg
	admin, err := e.api.AddUser(envtest.User{Name: "procnode-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	e.kubeconfig = filepath.Join(e.cfg.Dir, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	e.restConfig = admin.Config()
	return os.WriteFile(filepath.Join(e.cfg.Dir, "ca.crt"), e.restConfig.CAData, 0o644)
}

// apiServerAddress is the API server's advertised address.
const apiServerAddress = "10.244.0.1"

// controllers are kube-controller-manager's controllers the operator's
// objects meet in a cluster; the node controllers are left out (these
// nodes have no heartbeat to watch).
var controllers = []string{
	"garbage-collector-controller", "namespace-controller", "endpointslice-controller",
	"endpoints-controller", "disruption-controller", "persistentvolume-binder-controller",
	"persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller",
	"job-controller", "ttl-after-finished-controller", "cronjob-controller", "serviceaccount-controller", "serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller", "deployment-controller", "replicaset-controller",
	"statefulset-controller",
}

func (e *Env) startControllers() error {
	logs := filepath.Join(e.cfg.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	start := func(name string, args ...string) error {
		f, err := os.Create(filepath.Join(logs, name+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(filepath.Join(e.cfg.BinDir, name), args...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = f.Close()
			return fmt.Errorf("starting %s: %w", name, err)
		}
		e.procs = append(e.procs, cmd)
		return nil
	}
	// Each controller acts as its own service account, as in a kubeadm
	// cluster: the member-deletion guard lets the garbage collector's
	// through and no other.
	if err := start("kube-controller-manager", "--kubeconfig="+e.kubeconfig, "--leader-elect=false",
		"--secure-port=0", "--controllers="+strings.Join(controllers, ","),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(e.api.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--root-ca-file="+filepath.Join(e.cfg.Dir, "ca.crt"),
		// Garbage collection and namespace deletion answer within a second
		// or two, as a busy real cluster's do.
		"--concurrent-gc-syncs=10", "--namespace-sync-period=10s"); err != nil {
		return err
	}
	return start("kube-scheduler", "--kubeconfig="+e.kubeconfig, "--leader-elect=false", "--secure-port=0")
}

// Kubeconfig is the path of a cluster-admin kubeconfig.
func (e *Env) Kubeconfig() string { return e.kubeconfig }

// RESTConfig reaches the API server as cluster admin.
func (e *Env) RESTConfig() *rest.Config { return rest.CopyConfig(e.restConfig) }

// AddImage makes an image available on every node.
func (e *Env) AddImage(ref string, img Image) { e.kubelet.addImage(ref, img) }

// PodLog returns the log of a container's current or last run.
func (e *Env) PodLog(ns, pod, container string) string { return e.kubelet.podLog(ns, pod, container) }

// Down stops every Pod's processes, the controllers and the API server.
func (e *Env) Down() {
	if e.cancel != nil {
		e.cancel()
	}
	if e.kubelet != nil && e.kubelet.started {
		<-e.done
	}
	for _, p := range e.procs {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
	if e.api != nil {
		_ = e.api.Stop()
	}
}

// Kill kills a container's processes at once, as a crash would; the Pod's
// restart policy restarts it.
func (e *Env) Kill(_ context.Context, ns, pod, container string) error {
	r := e.kubelet.runnerOf(ns, pod)
	if r == nil {
		return fmt.Errorf("pod %s/%s is not running on a node", ns, pod)
	}
	r.mu.Lock()
	p := r.procs[container]
	r.mu.Unlock()
	if p == nil {
		return fmt.Errorf("container %s of pod %s/%s is not running", container, ns, pod)
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// Wipe deletes everything in the volume a claim is bound to, as a lost disk
// would leave it.
func (e *Env) Wipe(ctx context.Context, ns, claim string) error {
	return e.storage.Wipe(ctx, ns, claim)
}
