package instance

import (
	"net/netip"
	"testing"
)

func TestNames(t *testing.T) {
	in := &Instance{Dir: "/tmp/x", Name: "abc123", PodCIDR: netip.MustParsePrefix("10.77.0.0/16"), Nodes: 3}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ got, want string }{
		{in.HostLink(), "sbx-abc123"},
		{in.NetnsName(), "sbx-abc123"},
		{in.CgroupName(), "sandbox-abc123"},
		{in.HostIP().String(), "10.77.0.1"},
		{in.APIServerIP().String(), "10.77.0.2"},
		{in.NodeIP(0).String(), "10.77.0.10"},
		{in.NodeIP(MaxNodes - 1).String(), "10.77.0.209"},
		{in.NodeCIDR(0).String(), "10.77.1.0/24"},
		{in.NodeCIDR(2).String(), "10.77.3.0/24"},
		{in.NodeGateway(2).String(), "10.77.3.1"},
		{NodeBridge(MaxNodes - 1), "cni-node-199"},
		{in.ServiceCIDR().String(), "10.77.240.0/20"},
		{in.KubernetesServiceIP().String(), "10.77.240.1"},
		{in.DNSServiceIP().String(), "10.77.240.10"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	for _, name := range []string{in.HostLink(), NodeBridge(MaxNodes - 1), UplinkName} {
		if len(name) > 15 {
			t.Errorf("interface name %q does not fit IFNAMSIZ", name)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func() *Instance {
		return &Instance{Dir: "/d", Name: "a1", PodCIDR: netip.MustParsePrefix("10.1.0.0/16"), Nodes: 3}
	}
	tests := []struct {
		name   string
		modify func(*Instance)
		valid  bool
	}{
		{"defaults", func(*Instance) {}, true},
		{"relative dir", func(in *Instance) { in.Dir = "d" }, false},
		{"long name", func(in *Instance) { in.Name = "abcdefg" }, false},
		{"upper case name", func(in *Instance) { in.Name = "Ab" }, false},
		{"not a /16", func(in *Instance) { in.PodCIDR = netip.MustParsePrefix("10.1.0.0/24") }, false},
		{"host bits", func(in *Instance) { in.PodCIDR = netip.MustParsePrefix("10.1.2.0/16") }, false},
		{"no nodes", func(in *Instance) { in.Nodes = 0 }, false},
		{"too many nodes", func(in *Instance) { in.Nodes = MaxNodes + 1 }, false},
	}
	for _, tt := range tests {
		in := ok()
		tt.modify(in)
		if err := in.Validate(); (err == nil) != tt.valid {
			t.Errorf("%s: Validate() = %v, want valid=%v", tt.name, err, tt.valid)
		}
	}
}

func TestDefaults(t *testing.T) {
	if a, b := DefaultName("/x/.sandbox"), DefaultName("/y/.sandbox"); a == b || len(a) != 6 {
		t.Errorf("names %q and %q: want 6 characters, different per directory", a, b)
	}
	first, err := DefaultPodCIDR("abc", nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := DefaultPodCIDR("abc", func(p netip.Prefix) bool { return p == first })
	if err != nil {
		t.Fatal(err)
	}
	if first == second || second.Bits() != 16 {
		t.Errorf("taken prefix not skipped: %s then %s", first, second)
	}
	if _, err := DefaultPodCIDR("abc", func(netip.Prefix) bool { return true }); err == nil {
		t.Error("want an error when every prefix is taken")
	}
}
