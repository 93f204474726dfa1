// Package instance names everything one sandbox creates on the host: its
// directory layout, network namespace and the link into it, cgroup,
// addresses and the marker that finds its processes again after a crash. Two
// sandboxes with different names never share any of these, so they can run
// side by side.
package instance

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// MarkerEnv is set in the environment of every process the sandbox starts
// (the daemon, the control plane, the nodes' daemons) so `down` finds them
// after a crash. Container processes carry no marker; they are found through
// the instance's cgroup instead.
const MarkerEnv = "SANDBOX_INSTANCE"

// MaxNodes bounds --nodes: node i takes the /24 number i+1 of the Pod CIDR
// and the address .0.(10+i), and the services take the top /20, so 200 nodes
// is the most that fits.
const MaxNodes = 200

// validName keeps the instance id short enough for the host link's name to
// fit IFNAMSIZ (15 bytes).
var validName = regexp.MustCompile(`^[a-z0-9]{1,6}$`)

// Instance is the identity of one sandbox; it is written to D/instance.json
// so later commands (status, down, the tests) agree with the daemon.
type Instance struct {
	Dir     string       `json:"dir"`
	Name    string       `json:"name"`
	PodCIDR netip.Prefix `json:"podCIDR"`
	Nodes   int          `json:"nodes"`
}

// DefaultName derives the instance id from the directory, so the same
// directory always gets the same id and `down` can find an earlier run's
// leftovers even when instance.json is gone.
func DefaultName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
	return strings.ToLower(enc[:6])
}

// DefaultPodCIDR derives a 10.x.0.0/16 from the name, skipping second octets
// for which taken reports an overlap (a route or address already on the host).
func DefaultPodCIDR(name string, taken func(netip.Prefix) bool) (netip.Prefix, error) {
	sum := sha256.Sum256([]byte(name))
	start := int(binary.BigEndian.Uint16(sum[:2]))
	for i := range 254 {
		octet := 1 + (start+i)%254
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(octet), 0, 0}), 16)
		if taken == nil || !taken(p) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("every 10.x.0.0/16 overlaps a network on this host: pass --pod-cidr")
}

// Validate checks the fields a user can set.
func (in *Instance) Validate() error {
	if !filepath.IsAbs(in.Dir) {
		return fmt.Errorf("directory %q must be absolute", in.Dir)
	}
	if !validName.MatchString(in.Name) {
		return fmt.Errorf("name %q must be 1 to 6 lowercase letters or digits (it is part of interface names)", in.Name)
	}
	if !in.PodCIDR.Addr().Is4() || in.PodCIDR.Bits() != 16 || in.PodCIDR.Masked() != in.PodCIDR {
		return fmt.Errorf("pod CIDR %s must be an IPv4 /16 such as 10.42.0.0/16", in.PodCIDR)
	}
	if in.Nodes < 1 || in.Nodes > MaxNodes {
		return fmt.Errorf("nodes %d must be between 1 and %d", in.Nodes, MaxNodes)
	}
	return nil
}

// octets returns the first two octets of the Pod CIDR.
func (in *Instance) octets() (byte, byte) {
	a := in.PodCIDR.Addr().As4()
	return a[0], a[1]
}

func (in *Instance) addr(c, d byte) netip.Addr {
	a, b := in.octets()
	return netip.AddrFrom4([4]byte{a, b, c, d})
}

// NetnsName is the network namespace the whole sandbox lives in: the
// control plane, every node's kubelet and containerd, the node bridges,
// kube-proxy's rules. It is also the name of the host's end of the link
// into it.
func (in *Instance) NetnsName() string { return "sbx-" + in.Name }

// HostLink is the host's end of the veth pair into the sandbox's network
// namespace.
func (in *Instance) HostLink() string { return "sbx-" + in.Name }

// UplinkName is the sandbox's end of that pair, inside its namespace.
const UplinkName = "uplink"

// CgroupName is the instance's cgroup, directly below the root of every
// hierarchy: every process of the sandbox lives below it.
func (in *Instance) CgroupName() string { return "sandbox-" + in.Name }

// HostIP is the host's address on the link into the sandbox.
func (in *Instance) HostIP() netip.Addr { return in.addr(0, 1) }

// APIServerIP is the sandbox's own address on that link: the API server
// listens there, so the host and every Pod reach it.
func (in *Instance) APIServerIP() netip.Addr { return in.addr(0, 2) }

// LinkPrefix is the subnet of the link between host and sandbox.
func (in *Instance) LinkPrefix() netip.Prefix { return netip.PrefixFrom(in.addr(0, 0), 24) }

// NodeIP is node i's InternalIP, where its kubelet listens.
func (in *Instance) NodeIP(i int) netip.Addr { return in.addr(0, byte(10+i)) }

// NodeCIDR is the Pod CIDR of node i (0-based).
func (in *Instance) NodeCIDR(i int) netip.Prefix { return netip.PrefixFrom(in.addr(byte(i+1), 0), 24) }

// NodeGateway is the address of node i's bridge: its Pods' default gateway.
func (in *Instance) NodeGateway(i int) netip.Addr { return in.addr(byte(i+1), 1) }

// NodeBridge names node i's CNI bridge inside the sandbox's namespace.
func NodeBridge(i int) string { return fmt.Sprintf("cni-node-%d", i) }

// ServiceCIDR holds the Services' cluster IPs, routed by kube-proxy.
func (in *Instance) ServiceCIDR() netip.Prefix { return netip.PrefixFrom(in.addr(240, 0), 20) }

// KubernetesServiceIP is the first service IP, which kube-apiserver gives to
// the `kubernetes` Service; the serving certificate covers it.
func (in *Instance) KubernetesServiceIP() netip.Addr { return in.addr(240, 1) }

// DNSServiceIP is the cluster IP of kube-dns, CoreDNS's Service.
func (in *Instance) DNSServiceIP() netip.Addr { return in.addr(240, 10) }

// APIServerPort is the secure port. Each instance has its own address, so
// the standard port never collides and Pods reach https://kubernetes.default.svc.
const APIServerPort = 443

// KubeletPort is every kubelet's HTTPS port, on its own node IP.
const KubeletPort = 10250

// NodeName names node i.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// NodeDir holds node i's state: containerd's root and state, the kubelet's
// root, its CNI configuration and its Pods' logs.
func (in *Instance) NodeDir(i int) string { return in.Path("nodes", NodeName(i)) }

// Paths inside the sandbox directory.
func (in *Instance) Path(elem ...string) string {
	return filepath.Join(append([]string{in.Dir}, elem...)...)
}

// Kubeconfig is the admin kubeconfig.
func (in *Instance) Kubeconfig() string { return in.Path("kubeconfig") }

// Socket is the daemon's control socket.
func (in *Instance) Socket() string { return in.Path("control.sock") }

// PIDFile holds the daemon's process id.
func (in *Instance) PIDFile() string { return in.Path("daemon.pid") }

// LogDir holds the daemon's and the control plane's logs.
func (in *Instance) LogDir() string { return in.Path("logs") }

// Marker is the environment entry that tags this instance's processes.
func (in *Instance) Marker() string { return MarkerEnv + "=" + in.Name }

const fileName = "instance.json"

// Save writes instance.json, creating the directory.
func (in *Instance) Save() error {
	if err := os.MkdirAll(in.Dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(in.Path(fileName), data, 0o644)
}

// Load reads instance.json from dir.
func Load(dir string) (*Instance, error) {
	data, err := os.ReadFile(filepath.Join(dir, fileName))
	if err != nil {
		return nil, err
	}
	in := &Instance{}
	if err := json.Unmarshal(data, in); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, fileName), err)
	}
	return in, nil
}
