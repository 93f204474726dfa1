// Package sandbox is the Go API of the local Kubernetes, with real kubelets
// and containerd but no container engine, that the end-to-end tests stand
// on: Up starts a sandbox (through the sandbox binary, which detaches a
// daemon), Open attaches to a running one, and the methods inject faults and
// import images.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/cleanup"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/control"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/namespace"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/network"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// ErrNotRoot is returned by everything that changes the host.
var ErrNotRoot = errors.New("the sandbox must run as root: it creates network namespaces, cgroups and mounts, and runs kubelets (try sudo)")

// Config describes a sandbox. Zero values take the defaults.
type Config struct {
	Dir     string // default <repo>/.sandbox
	Nodes   int    // default 3
	Name    string // default derived from Dir
	PodCIDR string // default a free 10.x.0.0/16 derived from Name
	Binary  string // default <repo>/bin/sandbox
	// MaxBackoff caps CrashLoopBackOff (default the kubelet's 5m).
	MaxBackoff time.Duration
	// Timeout bounds Up (default 5m).
	Timeout time.Duration
}

// Sandbox is a running sandbox.
type Sandbox struct {
	in     *instance.Instance
	client *control.Client
}

// DefaultDir is <repo>/.sandbox.
func DefaultDir() string { return filepath.Join(tools.RepoRoot(), ".sandbox") }

func (cfg *Config) defaults() error {
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir()
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	cfg.Dir = dir
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Name == "" {
		cfg.Name = instance.DefaultName(cfg.Dir)
	}
	if cfg.Binary == "" {
		cfg.Binary = filepath.Join(tools.RepoRoot(), "bin", "sandbox")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	return nil
}

// Up starts a sandbox and returns once every node is Ready. If one already
// runs in the directory it is returned as is; leftovers of an earlier run
// that crashed are removed first.
func Up(ctx context.Context, cfg Config) (*Sandbox, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if s, err := Open(cfg.Dir); err == nil {
		if st, err := s.Status(ctx); err == nil && st.Ready {
			return s, nil
		}
		if err := s.Down(ctx); err != nil {
			return nil, err
		}
	}
	in, err := prepare(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	exited, err := startDaemon(cfg, in)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, in, exited); err != nil {
		err = fmt.Errorf("%w (daemon log: %s)\n%s", err, daemonLog(in), tail(daemonLog(in), 15))
		// Nothing half-started is left behind; the log goes with the
		// directory, so its tail is in the error.
		if derr := Down(context.WithoutCancel(ctx), cfg.Dir, cfg.Name); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	return Open(cfg.Dir)
}

// prepare removes an earlier run's leftovers and writes instance.json.
func prepare(ctx context.Context, cfg Config) (*instance.Instance, error) {
	if err := cleanup.Remove(ctx, &instance.Instance{Dir: cfg.Dir, Name: cfg.Name}); err != nil {
		return nil, fmt.Errorf("removing an earlier sandbox's leftovers: %w", err)
	}
	in := &instance.Instance{Dir: cfg.Dir, Name: cfg.Name, Nodes: cfg.Nodes}
	if cfg.PodCIDR != "" {
		p, err := netip.ParsePrefix(cfg.PodCIDR)
		if err != nil {
			return nil, fmt.Errorf("--pod-cidr: %w", err)
		}
		if hostOverlaps(p) {
			return nil, fmt.Errorf("--pod-cidr %s overlaps a network already on this host", p)
		}
		in.PodCIDR = p
	} else {
		p, err := instance.DefaultPodCIDR(cfg.Name, hostOverlaps)
		if err != nil {
			return nil, err
		}
		in.PodCIDR = p
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if err := in.Save(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(in.LogDir(), 0o755); err != nil {
		return nil, err
	}
	if err := network.Create(ctx, in); err != nil {
		return nil, fmt.Errorf("creating the sandbox's network namespace: %w", err)
	}
	return in, nil
}

// startDaemon runs `sandbox daemon` detached (its own session, output to
// D/logs/daemon.log) in a new mount namespace; it joins the sandbox's
// network namespace itself. The returned channel closes when it exits.
func startDaemon(cfg Config, in *instance.Instance) (<-chan struct{}, error) {
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("sandbox binary %s: %w (run `make sandbox-bin`)", cfg.Binary, err)
	}
	bin, err := tools.BinDir()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(daemonLog(in), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := []string{"daemon", "--dir", in.Dir}
	if cfg.MaxBackoff > 0 {
		args = append(args, "--max-backoff", cfg.MaxBackoff.String())
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(os.Environ(), in.Marker(), "ETCD_OPERATOR_TOOLS_BIN="+bin, namespace.NetnsEnv+"="+network.NetnsPath(in))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the sandbox daemon: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaps the daemon if this process outlives it
		close(exited)
	}()
	return exited, nil
}

func waitReady(ctx context.Context, in *instance.Instance, exited <-chan struct{}) error {
	c := control.NewClient(in.Socket())
	for {
		var st control.Status
		if err := c.Call(ctx, control.PathStatus, nil, &st); err == nil {
			if st.Ready {
				return nil
			}
			if st.Error != "" {
				return errors.New("sandbox setup failed: " + st.Error)
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("the sandbox did not become ready in time")
		case <-exited:
			return errors.New("the sandbox daemon exited during setup")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func daemonLog(in *instance.Instance) string { return filepath.Join(in.LogDir(), "daemon.log") }

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hostOverlaps reports whether p overlaps a route or address of the host,
// so a sandbox never shadows a real network (or another sandbox).
func hostOverlaps(p netip.Prefix) bool {
	ifaces, _ := net.Interfaces()
	for _, iface := range ifaces {
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if pn, err := netip.ParsePrefix(a.String()); err == nil && pn.Addr().Is4() && pn.Masked().Overlaps(p) {
				return true
			}
		}
	}
	for _, r := range routes() {
		if r.Bits() > 0 && r.Overlaps(p) {
			return true
		}
	}
	return false
}

// routes reads the IPv4 routing table.
func routes() []netip.Prefix {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		dst, err1 := strconv.ParseUint(f[1], 16, 32)
		mask, err2 := strconv.ParseUint(f[7], 16, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		// The file holds little-endian words.
		d := netip.AddrFrom4([4]byte{byte(dst), byte(dst >> 8), byte(dst >> 16), byte(dst >> 24)})
		bits := 0
		for m := uint32(mask); m != 0; m >>= 1 {
			bits += int(m & 1)
		}
		out = append(out, netip.PrefixFrom(d, bits))
	}
	return out
}

// Open attaches to the sandbox running in dir.
func Open(dir string) (*Sandbox, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	in, err := instance.Load(abs)
	if err != nil {
		return nil, fmt.Errorf("no sandbox in %s: %w", abs, err)
	}
	s := &Sandbox{in: in, client: control.NewClient(in.Socket())}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Status(ctx); err != nil {
		return nil, fmt.Errorf("the sandbox in %s is not running: %w", abs, err)
	}
	return s, nil
}

// Down stops the sandbox in dir (if any) and removes everything it made.
// It succeeds when nothing runs. name is needed only when dir's
// instance.json is gone and the sandbox was started with --name.
func Down(ctx context.Context, dir, name string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	in, err := instance.Load(abs)
	if err != nil {
		in = &instance.Instance{Dir: abs, Name: name}
		if in.Name == "" {
			in.Name = instance.DefaultName(abs)
		}
	}
	stopDaemon(ctx, in)
	return cleanup.Remove(ctx, in)
}

// stopDaemon asks the daemon to shut down (it stops the Pods first) and
// waits for it; a daemon that does not answer is killed by cleanup.
func stopDaemon(ctx context.Context, in *instance.Instance) {
	pid := daemonPID(in)
	c := control.NewClient(in.Socket())
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := c.Call(callCtx, control.PathShutdown, control.Target{}, nil)
	cancel()
	if err != nil && pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(time.Minute)
	for pid > 0 && time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
		time.Sleep(50 * time.Millisecond)
	}
}

func daemonPID(in *instance.Instance) int {
	data, err := os.ReadFile(in.PIDFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil || !strings.Contains(string(env), in.Marker()+"\x00") {
		return 0 // not ours: the pid was reused
	}
	return pid
}

func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i > 0 && i+2 < len(data) && data[i+2] == 'Z'
}
