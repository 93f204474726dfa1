// Package namespace puts the sandbox's daemon, and with it every process of
// the sandbox, into a host of its own: the instance's network namespace and
// a private mount namespace. Kubelet, containerd, the CNI plugins and
// kube-proxy then change only that host: their routes, bridges and nftables
// rules live in the network namespace, their mounts (container root
// filesystems, volumes, the kubelet's own bind mount) and the files they keep
// at fixed paths (/run/containerd, /var/lib/cni, /var/log/containers) in the
// mount namespace, and both vanish with the sandbox's last process, even
// after a crash.
package namespace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// EnteredEnv marks a process that already runs inside the sandbox's
// network namespace, so the daemon enters it exactly once.
const EnteredEnv = "SANDBOX_NETNS_ENTERED"

// NetnsEnv names the network namespace file the daemon enters.
const NetnsEnv = "SANDBOX_NETNS"

// ReexecInNetns joins the network namespace named by $SANDBOX_NETNS and
// executes the same command again there. It must run on the main thread,
// locked by an init function: setns changes one thread, and the exec that
// follows carries that thread's namespace to every thread of the new
// program. It returns only on failure.
func ReexecInNetns() error {
	path := os.Getenv(NetnsEnv)
	if path == "" {
		return errors.New(NetnsEnv + " is not set")
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("joining network namespace %s: %w", path, err)
	}
	_ = unix.Close(fd)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(self, os.Args, append(os.Environ(), EnteredEnv+"=1"))
}

// HiddenDirs are the host directories the sandbox's processes see as empty
// and private: containerd keeps shim sockets in /run/containerd, the CNI
// library its cache in /var/lib/cni, the kubelet its log links in
// /var/log/containers, whatever their configuration says.
var HiddenDirs = []string{"/run", "/var/lib", "/var/log"}

// Tunable is a kernel setting the kubelet insists on (it writes the value
// at start when it differs).
type Tunable struct {
	Path  string // under /proc/sys
	Value int
}

// KubeletTunables are the kernel settings kubelet v1.37 sets at start
// (setupKernelTunables in pkg/kubelet/cm). They are machine-wide, so the
// sandbox shows the kubelet files holding these values instead, and the
// machine's own settings are never changed.
var KubeletTunables = []Tunable{
	{"vm/overcommit_memory", 1},
	{"vm/panic_on_oom", 0},
	{"kernel/panic", 10},
	{"kernel/panic_on_oops", 1},
	{"kernel/keys/root_maxkeys", 1000000},
	{"kernel/keys/root_maxbytes", 25000000},
}

// SetupMounts prepares the private mount namespace the daemon was started
// in: nothing mounted here propagates to the host, the hidden directories
// get empty tmpfs mounts, and the kubelet's tunables are shadowed by files
// under stateDir. It refuses a state directory inside a hidden directory,
// which the daemon could not share with the host.
func SetupMounts(stateDir string) error {
	for _, d := range HiddenDirs {
		if stateDir == d || strings.HasPrefix(stateDir, d+"/") {
			return fmt.Errorf("the sandbox directory %s must not be under %s (the sandbox hides that directory from its own processes)", stateDir, d)
		}
	}
	// First of all: no mount made from now on may reach the host.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making / a slave mount: %w", err)
	}
	for _, d := range HiddenDirs {
		if err := unix.Mount("sandbox", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", d, err)
		}
	}
	return shadowTunables(filepath.Join(stateDir, "sysctl"))
}

func shadowTunables(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range KubeletTunables {
		file := filepath.Join(dir, strings.ReplaceAll(t.Path, "/", "."))
		if err := os.WriteFile(file, []byte(strconv.Itoa(t.Value)+"\n"), 0o444); err != nil {
			return err
		}
		target := filepath.Join("/proc/sys", t.Path)
		if err := unix.Mount(file, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("shadowing %s: %w", target, err)
		}
		// Read-only, so a write fails loudly instead of landing in the file.
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", target, err)
		}
	}
	return nil
}
