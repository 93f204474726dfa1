//go:build linux

package procnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// envInside marks the copy of a test binary that runs in the private mount
// namespace; its value is the hosts file bound over /etc/hosts there.
const envInside = "PROCNODE_MOUNT_NAMESPACE_HOSTS"

// Enter runs the calling test binary again in a mount and a network
// namespace of its own, where the file at hostsFile is /etc/hosts, and
// returns the exit code the caller should exit with (inside is false).
// Inside that copy it returns inside true and the caller goes on to run its
// tests.
//
// The mount namespace is why this environment needs no cluster DNS: the
// test, the Pods' processes (which inherit it) and the programs they start
// resolve the Pods' names from that one file, which the node rewrites as
// Pods come and go; and every bind mount a Pod's file system is made of
// lives and dies with it, invisible on the host. The network namespace
// holds the Pods' addresses (PodCIDR, all local to its loopback device: the
// API server refuses loopback addresses in EndpointSlices) and every port
// the environment listens on, apart from the host's. It needs root
// (CAP_SYS_ADMIN), as the sandbox does.
func Enter(hostsFile string) (code int, inside bool, err error) {
	if bound := os.Getenv(envInside); bound != "" {
		if err := bindHosts(bound); err != nil {
			return 1, true, err
		}
		return 0, true, bringUpNetwork()
	}
	if os.Geteuid() != 0 {
		return 1, false, errors.New("the integration tier needs root: it runs Pods' processes in a mount namespace of its own")
	}
	if err := os.WriteFile(hostsFile, []byte(hostsHeader), 0o644); err != nil {
		return 1, false, err
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInside+"="+hostsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 1, false, fmt.Errorf("starting the tests in a mount namespace: %w", err)
	}
	// Ctrl-C and the test timeout's signals reach the copy, which cleans up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), false, nil
	}
	if err != nil {
		return 1, false, err
	}
	return 0, false, nil
}

// bindHosts makes every mount of the namespace private, so nothing mounted
// here shows on the host, and binds the hosts file over /etc/hosts.
func bindHosts(hostsFile string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	if err := syscall.Mount(hostsFile, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s over /etc/hosts: %w", hostsFile, err)
	}
	return nil
}

const hostsHeader = "127.0.0.1 localhost\n::1 localhost\n"

// PodCIDR holds the Pods' addresses: every one is local to the namespace's
// loopback device, so a Pod's process can listen on its own.
const PodCIDR = "10.244.0.0/16"

// bringUpNetwork starts the namespace's loopback device and makes every
// address of PodCIDR and ServiceCIDR local to it.
func bringUpNetwork() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"route", "add", "local", PodCIDR, "dev", "lo", "table", "local"},
		{"route", "add", "local", ServiceCIDR, "dev", "lo", "table", "local"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return nil
}
