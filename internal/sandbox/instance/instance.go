// Package instance names everything one sandbox creates on the host: its
// directory layout, bridge, veths, network namespaces, addresses and the
// marker that finds its processes again after a crash. Two sandboxes with
// different names never share any of these, so they can run side by side.
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
	"strconv"
	"strings"
)

// MarkerEnv is set in the environment of every process the sandbox starts
// (the daemon and the control plane) so `down` finds them after a crash.
// Container processes carry no marker; they are found through their Pod's
// network namespace instead.
const MarkerEnv = "SANDBOX_INSTANCE"

// MaxNodes bounds --nodes: node i takes the /24 number i+1 of the Pod CIDR
// and the services take the top /20, so 200 nodes is the most that fits.
const MaxNodes = 200

// validName keeps the instance id short enough for every interface name to
// fit IFNAMSIZ (15 bytes including the veth counter).
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

// BridgeName is the Linux bridge every Pod veth of this sandbox joins.
func (in *Instance) BridgeName() string { return "sbx-" + in.Name }

// VethPrefix starts the host side name of every Pod veth.
func (in *Instance) VethPrefix() string { return "sv" + in.Name + "-" }

// VethName is the host side of the n-th Pod veth (base 36 keeps it short).
func (in *Instance) VethName(n uint64) string {
	return in.VethPrefix() + strconv.FormatUint(n%2176782336, 36)
}

// NetnsPrefix starts the name of every Pod network namespace.
func (in *Instance) NetnsPrefix() string { return "sbx-" + in.Name + "-" }

// NetnsName names the network namespace of one Pod.
func (in *Instance) NetnsName(podUID string) string { return in.NetnsPrefix() + podUID }

// BridgeIP is the host's address on the bridge: the API server, the kubelet
// ports of every node and every node's InternalIP live there.
func (in *Instance) BridgeIP() netip.Addr {
	a, b := in.octets()
	return netip.AddrFrom4([4]byte{a, b, 0, 1})
}

// NodeCIDR is the Pod CIDR of node i (0-based).
func (in *Instance) NodeCIDR(i int) netip.Prefix {
	a, b := in.octets()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b, byte(i + 1), 0}), 24)
}

// ServiceCIDR holds the Services' cluster IPs. Nothing routes them (there is
// no kube-proxy); it only has to differ between instances.
func (in *Instance) ServiceCIDR() netip.Prefix {
	a, b := in.octets()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b, 240, 0}), 20)
}

// KubernetesServiceIP is the first service IP, which kube-apiserver gives to
// the `kubernetes` Service; the serving certificate covers it.
func (in *Instance) KubernetesServiceIP() netip.Addr {
	a, b := in.octets()
	return netip.AddrFrom4([4]byte{a, b, 240, 1})
}

// APIServerPort is the secure port. Each instance has its own bridge IP, so
// the standard port never collides and Pods reach https://kubernetes.default.svc.
const APIServerPort = 443

// KubeletPort is the HTTPS port of node i on the bridge IP.
func KubeletPort(i int) int { return 10250 + i }

// NodeName names node i.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

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
