// Package network builds the sandbox's network. The sandbox lives in a
// network namespace of its own, joined to the host by one veth pair: the
// host reaches the API server, the kubelets and every Pod IP through it, and
// nothing inside has a route anywhere else, so nothing a Pod sends can leave
// the machine. Inside, each node has a CNI bridge for its Pods (made by the
// bridge plugin), the namespace routes between the bridges, and kube-proxy's
// nftables rules route Services, for Pods and for the namespace's own
// processes alike. The faults that cut Pods or whole nodes off
// are an nftables table of the sandbox's own that drops their traffic.
package network

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

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
)

// NetnsDir is where iproute2 keeps named network namespaces.
const NetnsDir = "/run/netns"

// run runs a command and returns its stderr in the error.
func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func ip(ctx context.Context, args ...string) error { return run(ctx, "ip", args...) }

// missing reports whether err says the object does not exist, which every
// teardown step treats as done.
func missing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Cannot find device") || strings.Contains(s, "No such file") ||
		strings.Contains(s, "does not exist") || strings.Contains(s, "Invalid \"netns\"")
}

// NetnsPath is the file of the sandbox's network namespace.
func NetnsPath(in *instance.Instance) string { return filepath.Join(NetnsDir, in.NetnsName()) }

// Create makes the sandbox's network namespace and the link into it: the
// host side holds HostIP and routes the Pod CIDR into the namespace; the
// namespace side holds the API server's address and one address per node.
// It starts by removing whatever an earlier run left.
func Create(ctx context.Context, in *instance.Instance) error {
	if err := Delete(ctx, in); err != nil {
		return err
	}
	ns, link := in.NetnsName(), in.HostLink()
	bits := in.LinkPrefix().Bits()
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", link, "type", "veth", "peer", "name", instance.UplinkName, "netns", ns},
		{"addr", "add", netip.PrefixFrom(in.HostIP(), bits).String(), "dev", link},
		{"link", "set", link, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", netip.PrefixFrom(in.APIServerIP(), bits).String(), "dev", instance.UplinkName},
	}
	for i := range in.Nodes {
		steps = append(steps, []string{"-n", ns, "addr", "add", netip.PrefixFrom(in.NodeIP(i), bits).String(), "dev", instance.UplinkName})
	}
	steps = append(steps,
		[]string{"-n", ns, "link", "set", instance.UplinkName, "up"},
		serviceRoute(in),
		// The host reaches every Pod through the namespace.
		[]string{"route", "add", in.PodCIDR.String(), "via", in.APIServerIP().String(), "dev", link},
	)
	for _, args := range steps {
		if err := ip(ctx, args...); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", link, "disable_ipv6"), []byte("1"), 0o644)
}

// serviceRoute lets the namespace's own processes (the API server calling
// a webhook or an aggregated API) connect to cluster IPs. A connection made
// here is routed before kube-proxy's output chain translates its address,
// so with no route for the Service CIDR it fails at once with "network is
// unreachable"; on a real node the default route covers it. The route
// points at the uplink as on-link, not at the host: a packet kube-proxy
// translates leaves by a node bridge, and one it does not (an unallocated
// cluster IP, which kube-proxy drops anyway) finds no neighbour on the link
// and goes nowhere. Connections come from the API server's address, which
// every Pod routes back to.
func serviceRoute(in *instance.Instance) []string {
	return []string{"-n", in.NetnsName(), "route", "add", in.ServiceCIDR().String(),
		"dev", instance.UplinkName, "src", in.APIServerIP().String()}
}

// Configure sets up the namespace from inside (the daemon runs it once it
// has entered): it routes between the node bridges and the link (the host's
// own forwarding setting is per namespace and stays as it is), has no IPv6,
// and gets the fault table.
func Configure(ctx context.Context) error {
	for file, value := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward":                "1",
		"/proc/sys/net/ipv6/conf/all/disable_ipv6":     "1",
		"/proc/sys/net/ipv6/conf/default/disable_ipv6": "1",
	} {
		if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
			return err
		}
	}
	return SetupFaults(ctx)
}

// Delete removes the link and the namespace; missing ones are fine. Pods'
// namespaces and the bridges inside go with it once no process holds them.
func Delete(ctx context.Context, in *instance.Instance) error {
	var errs []error
	if err := ip(ctx, "link", "del", in.HostLink()); err != nil && !missing(err) {
		errs = append(errs, err)
	}
	if _, err := os.Stat(NetnsPath(in)); err == nil {
		if err := ip(ctx, "netns", "del", in.NetnsName()); err != nil && !missing(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers names what of the instance's network is still on the host.
func Leftovers(in *instance.Instance) []string {
	var out []string
	if _, err := os.Stat(NetnsPath(in)); err == nil {
		out = append(out, "network namespace "+in.NetnsName())
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", in.HostLink())); err == nil {
		out = append(out, "link "+in.HostLink())
	}
	return out
}
