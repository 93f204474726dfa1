// Package netns builds the sandbox's private network with iproute2: one
// bridge per sandbox holding the host's address, and one network namespace
// per Pod joined to the bridge by a veth pair. Pods get no default route, so
// nothing a Pod sends can leave the bridge's /16, whatever the host's
// forwarding settings are.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RunDir is where iproute2 keeps named network namespaces.
const RunDir = "/run/netns"

// ip runs one iproute2 command and returns its stderr in the error.
func ip(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// missing reports whether err says the object does not exist, which every
// teardown step treats as done.
func missing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Cannot find device") || strings.Contains(s, "No such file") ||
		strings.Contains(s, "does not exist") || strings.Contains(s, "Invalid \"netns\"")
}

// EnsureBridge creates the bridge (or reuses it) with addr as the host's
// address, and turns off forwarding of what arrives on it.
func EnsureBridge(ctx context.Context, name string, addr netip.Prefix) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		if err := ip(ctx, "link", "add", name, "type", "bridge", "forward_delay", "0", "stp_state", "0"); err != nil {
			return err
		}
	}
	if err := ip(ctx, "addr", "replace", addr.String(), "dev", name); err != nil {
		return err
	}
	// Belt and braces besides the Pods' missing default route: even with
	// net.ipv4.ip_forward=1 on the host, nothing received on the bridge is
	// routed elsewhere.
	_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", name, "forwarding"), []byte("0"), 0o644)
	_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", name, "disable_ipv6"), []byte("1"), 0o644)
	return ip(ctx, "link", "set", name, "up")
}

// DeleteLink removes a link; a missing one is not an error.
func DeleteLink(ctx context.Context, name string) error {
	if err := ip(ctx, "link", "del", name); err != nil && !missing(err) {
		return err
	}
	return nil
}

// Pod is the network of one Pod.
type Pod struct {
	Netns  string       // name under /run/netns
	Veth   string       // host side of the veth pair
	Bridge string       // bridge the host side joins
	Addr   netip.Prefix // Pod IP with the bridge's prefix length
}

// Setup creates the namespace, the veth pair and the addresses. It starts by
// removing whatever an earlier attempt left with the same names.
func Setup(ctx context.Context, p Pod) error {
	if err := Teardown(ctx, p); err != nil {
		return err
	}
	steps := [][]string{
		{"netns", "add", p.Netns},
		{"link", "add", p.Veth, "type", "veth", "peer", "name", "eth0", "address", MAC(p.Addr.Addr()), "netns", p.Netns},
		{"link", "set", p.Veth, "master", p.Bridge, "up"},
		{"-n", p.Netns, "addr", "add", p.Addr.String(), "dev", "eth0"},
		{"-n", p.Netns, "link", "set", "eth0", "up"},
		{"-n", p.Netns, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := ip(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// MAC derives the Pod's MAC address from its IP, as Docker does: when an
// IP is handed out again, the neighbour caches of the host and of other
// Pods stay right instead of pointing at a vanished interface for seconds.
func MAC(ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// Teardown removes the veth pair and the namespace; missing ones are fine.
func Teardown(ctx context.Context, p Pod) error {
	err := DeleteLink(ctx, p.Veth)
	if nerr := DeleteNetns(ctx, p.Netns); nerr != nil {
		err = errors.Join(err, nerr)
	}
	return err
}

// DeleteNetns removes a named network namespace; a missing one is fine.
func DeleteNetns(ctx context.Context, name string) error {
	if _, err := os.Stat(filepath.Join(RunDir, name)); err != nil {
		return nil
	}
	if err := ip(ctx, "netns", "del", name); err != nil && !missing(err) {
		return err
	}
	return nil
}

// SetLink brings a host-side veth up or down: down cuts the Pod off from
// every other Pod and from the host, up heals it.
func SetLink(ctx context.Context, name string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip(ctx, "link", "set", name, state)
}

// Links lists the network interfaces whose name starts with prefix.
func Links(prefix string) ([]string, error) {
	return listPrefix("/sys/class/net", prefix)
}

// Namespaces lists the named network namespaces starting with prefix.
func Namespaces(prefix string) ([]string, error) {
	return listPrefix(RunDir, prefix)
}

func listPrefix(dir, prefix string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Path returns the file that holds a named network namespace.
func Path(name string) string { return filepath.Join(RunDir, name) }
