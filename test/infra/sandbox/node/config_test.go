package node

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
)

func testNode(i int, maxBackoff time.Duration) *Node {
	in := &instance.Instance{Dir: "/tmp/sb", Name: "abc123", PodCIDR: netip.MustParsePrefix("10.77.0.0/16"), Nodes: 3}
	return New(Config{Instance: in, Index: i, ToolsBin: "/tools/bin", CAFile: "/tmp/sb/pki/ca.crt",
		Runc: "/usr/sbin/runc", CNIBinDir: "/usr/lib/cni", PauseImage: "registry.k8s.io/pause:x", MaxBackoff: maxBackoff})
}

// TestKubeletConfig: each node has its own address, cgroup root, runtime
// socket and DNS settings; the back-off cap is set only when asked for.
func TestKubeletConfig(t *testing.T) {
	for _, tt := range []struct {
		i          int
		maxBackoff time.Duration
		want       map[string]any
	}{
		{0, 0, map[string]any{
			"address": "10.77.0.10", "cgroupRoot": "/sandbox-abc123/node-0", "clusterDNS": []any{"10.77.240.10"},
			"containerRuntimeEndpoint": "unix:///tmp/sb/nodes/node-0/containerd.sock", "failCgroupV1": false,
			"makeIPTablesUtilChains": false, "crashLoopBackOff": nil,
		}},
		{2, 10 * time.Second, map[string]any{
			"address": "10.77.0.12", "cgroupRoot": "/sandbox-abc123/node-2",
			"crashLoopBackOff": map[string]any{"maxContainerRestartPeriod": "10s"},
		}},
	} {
		data, err := testNode(tt.i, tt.maxBackoff).kubeletConfig()
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		for k, want := range tt.want {
			if g, _ := json.Marshal(got[k]); string(g) != mustJSON(want) {
				t.Errorf("node %d: %s = %s, want %s", tt.i, k, g, mustJSON(want))
			}
		}
	}
}

func mustJSON(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// TestNodeNetworkAndRuntime: the bridge, subnet and gateway are the
// node's; containerd keeps everything in the node's directory, restricts
// OOM scores and has NRI off.
func TestNodeNetworkAndRuntime(t *testing.T) {
	n := testNode(1, 0)
	cni, err := n.cniConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"bridge": "cni-node-1"`, `"subnet": "10.77.2.0/24"`, `"gateway": "10.77.2.1"`, `"dataDir": "/tmp/sb/nodes/node-1/cni/ipam"`} {
		if !strings.Contains(string(cni), want) {
			t.Errorf("CNI configuration lacks %s:\n%s", want, cni)
		}
	}
	conf := n.containerdConfig()
	for _, want := range []string{
		`root = "/tmp/sb/nodes/node-1/containerd/root"`, `address = "/tmp/sb/nodes/node-1/containerd.sock"`,
		`restrict_oom_score_adj = true`, `"io.containerd.nri.v1.nri"`, `Root = "/tmp/sb/nodes/node-1/runc"`,
		`sandbox = "registry.k8s.io/pause:x"`, `netns_mounts_under_state_dir = true`,
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd configuration lacks %s", want)
		}
	}
	args := strings.Join(n.kubeletArgs(), " ")
	for _, want := range []string{"--hostname-override=node-1", "--node-ip=10.77.0.11", "topology.kubernetes.io/zone=zone-1"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet flags lack %s: %s", want, args)
		}
	}
}
