// Package node runs one node of the sandbox: a real kubelet with its own
// containerd (and runc), a CNI bridge for its Pods, its own cgroup and its
// own directory, beside the other nodes in the sandbox's network and mount
// namespaces. It also carries out the faults that act on a node: killing a
// container through the runtime, and stopping and starting the node the way
// a machine dies and comes back.
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/cgroups"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/proc"
)

// Config is what a node needs from the daemon.
type Config struct {
	Instance *instance.Instance
	Index    int
	ToolsBin string
	Cgroups  *cgroups.Host
	// CAFile verifies the API server's client certificate at the kubelet.
	CAFile string
	// Runc and CNIBinDir are the host's runc and CNI plugins.
	Runc      string
	CNIBinDir string
	// PauseImage is the Pod sandbox image.
	PauseImage string
	// MaxBackoff caps CrashLoopBackOff (zero: the kubelet's 5 minutes).
	MaxBackoff time.Duration
	// Env is the environment of the node's processes (with the marker).
	Env []string
}

// Node is one node.
type Node struct {
	cfg Config
	dir string

	mu         sync.Mutex
	containerd *proc.Process
	kubelet    *proc.Process
	stopped    bool
}

// New returns node cfg.Index; nothing runs until Start.
func New(cfg Config) *Node {
	return &Node{cfg: cfg, dir: cfg.Instance.NodeDir(cfg.Index)}
}

// Name is the node's name.
func (n *Node) Name() string { return instance.NodeName(n.cfg.Index) }

// Index is the node's number.
func (n *Node) Index() int { return n.cfg.Index }

func (n *Node) socket() string { return filepath.Join(n.dir, "containerd.sock") }
func (n *Node) pkiDir() string { return filepath.Join(n.dir, "pki") }
func (n *Node) logPath(name string) string {
	return filepath.Join(n.cfg.Instance.LogDir(), n.Name()+"-"+name+".log")
}

// cgroup is the node's cgroup, the root of its Pods' cgroups.
func (n *Node) cgroup() string {
	return "/" + n.cfg.Instance.CgroupName() + "/" + n.Name()
}

func bridgeName(i int) string { return instance.NodeBridge(i) }

// Prepare writes the node's configuration and makes its cgroup; the
// credentials come from WriteCredentials.
func (n *Node) Prepare() error {
	for _, d := range []string{"containerd/root", "containerd/state", "containerd/tmp", "runc", "cni/net.d", "cni/ipam", "kubelet", "pods", "pki"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := n.cfg.Cgroups.Create(n.cgroup()); err != nil {
		return fmt.Errorf("creating cgroup %s: %w", n.cgroup(), err)
	}
	cni, err := n.cniConfig()
	if err != nil {
		return err
	}
	kubelet, err := n.kubeletConfig()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"containerd.toml":               []byte(n.containerdConfig()),
		"cni/net.d/10-sandbox.conflist": cni,
		"kubelet.yaml":                  kubelet,
		// No upstream DNS: CoreDNS answers the cluster's names only.
		"resolv.conf": []byte("# The sandbox has no upstream DNS server.\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// StartRuntime starts containerd and waits until it answers.
func (n *Node) StartRuntime(ctx context.Context) error {
	p := &proc.Process{
		Name:    n.Name() + "-containerd",
		Path:    filepath.Join(n.cfg.ToolsBin, "containerd"),
		Args:    []string{"--config", filepath.Join(n.dir, "containerd.toml"), "--log-level", "warn"},
		Env:     n.env(),
		LogPath: n.logPath("containerd"),
	}
	if err := p.Start(); err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return p.WaitFor(waitCtx, "ready", func(ctx context.Context) error {
		return n.ctr(ctx, "version")
	})
}

// env is the nodes' processes' environment: the toolchain first on PATH
// (containerd finds its shim there), and temporary files in the node's
// directory.
func (n *Node) env() []string {
	env := []string{"PATH=" + n.cfg.ToolsBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"TMPDIR=" + filepath.Join(n.dir, "containerd", "tmp")}
	for _, kv := range n.cfg.Env {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	return env
}

// ctr runs ctr against the node's containerd in the Kubernetes namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	args = append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(n.cfg.ToolsBin, "ctr"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Import imports an image tarball as it is into the node's containerd
// (and unpacks it), in ctr's own process: through the transfer service the
// same import takes twice as long.
func (n *Node) Import(ctx context.Context, file string) error {
	err := n.ctr(ctx, "images", "import", "--local", file)
	if err != nil && strings.Contains(err.Error(), "filtered out") {
		return fmt.Errorf("%s holds no image for linux/%s", file, runtime.GOARCH)
	}
	return err
}

// StartKubelet starts the kubelet; the node registers itself.
func (n *Node) StartKubelet() error {
	p := &proc.Process{
		Name:    n.Name() + "-kubelet",
		Path:    filepath.Join(n.cfg.ToolsBin, "kubelet"),
		Args:    n.kubeletArgs(),
		Env:     n.env(),
		LogPath: n.logPath("kubelet"),
	}
	if err := p.Start(); err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	return nil
}

// Running reports whether the node runs (it was not stopped by a fault).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.stopped
}

// KillContainers SIGKILLs containers through containerd; the kubelet sees
// them exit (137) and restarts them by the Pod's restart policy.
func (n *Node) KillContainers(ctx context.Context, ids []string) error {
	if !n.Running() {
		return fmt.Errorf("node %s is stopped", n.Name())
	}
	var errs []error
	for _, id := range ids {
		if err := n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop is a power cut: the kubelet dies, every container of the node is
// frozen where it stands (no process of it runs, writes or answers), and
// the network drops everything to and from the node's Pods and its
// address. containerd stays up, unseen, holding the frozen containers.
func (n *Node) Stop(ctx context.Context, cut func(context.Context) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return nil
	}
	if err := cut(ctx); err != nil {
		return err
	}
	if n.kubelet != nil {
		n.kubelet.Stop(0)
		n.kubelet = nil
	}
	if err := n.cfg.Cgroups.Freeze(n.cgroup(), true); err != nil {
		return err
	}
	n.stopped = true
	return nil
}

// Start brings a stopped node back: its containers run on, its network
// comes back and a new kubelet takes over the node, like a machine that
// booted with its disks: it finalises the Pods deleted meanwhile and keeps
// (or restarts) those still bound to it.
func (n *Node) Start(ctx context.Context, restore func(context.Context) error) error {
	n.mu.Lock()
	stopped := n.stopped
	n.mu.Unlock()
	if !stopped {
		return nil
	}
	if err := n.cfg.Cgroups.Freeze(n.cgroup(), false); err != nil {
		return err
	}
	if err := restore(ctx); err != nil {
		return err
	}
	if err := n.StartKubelet(); err != nil {
		return err
	}
	n.mu.Lock()
	n.stopped = false
	n.mu.Unlock()
	slog.Info("Node started again", "node", n.Name())
	return nil
}

// Shutdown ends the node for good: the kubelet, every container (by their
// cgroup, thawed first), then containerd.
func (n *Node) Shutdown() {
	n.mu.Lock()
	kubelet, containerd := n.kubelet, n.containerd
	n.kubelet, n.containerd = nil, nil
	n.mu.Unlock()
	if kubelet != nil {
		kubelet.Stop(0)
	}
	if err := n.cfg.Cgroups.Remove(n.cgroup()); err != nil {
		slog.Warn("Could not remove a node's cgroup", "node", n.Name(), "err", err)
	}
	if containerd != nil {
		containerd.Stop(2 * time.Second)
	}
}

// KubeletAddress is where the node's kubelet serves.
func (n *Node) KubeletAddress() string {
	return net.JoinHostPort(n.cfg.Instance.NodeIP(n.cfg.Index).String(), strconv.Itoa(instance.KubeletPort))
}
