package node

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
)

// containerdConfig is node i's containerd configuration: everything it
// keeps (root, state, sockets, runc's state, CNI configuration and IP
// allocations) lives in the node's directory, NRI is off (its socket path
// is global), and the OOM score of containers is never set below
// containerd's own: root here lacks CAP_SYS_RESOURCE, and runc fails every
// container whose score it cannot lower.
func (n *Node) containerdConfig() string {
	d := n.dir
	r := strings.NewReplacer(
		"@ROOT@", filepath.Join(d, "containerd", "root"),
		"@STATE@", filepath.Join(d, "containerd", "state"),
		"@TEMP@", filepath.Join(d, "containerd", "tmp"),
		"@SOCKET@", n.socket(),
		"@RUNC_ROOT@", filepath.Join(d, "runc"),
		"@RUNC@", n.cfg.Runc,
		"@CNI_BIN@", n.cfg.CNIBinDir,
		"@CNI_CONF@", filepath.Join(d, "cni", "net.d"),
		"@PAUSE@", n.cfg.PauseImage,
	)
	return r.Replace(`version = 3
root = "@ROOT@"
state = "@STATE@"
temp = "@TEMP@"
# Plugins a node does not use; "opt" would create /opt/containerd.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.native",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "@SOCKET@"

[ttrpc]
  address = "@SOCKET@.ttrpc"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "@RUNC@"
        Root = "@RUNC_ROOT@"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["@CNI_BIN@"]
    conf_dir = "@CNI_CONF@"
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "@PAUSE@"

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`)
}

// cniConfig is node i's Pod network: a bridge of its own with the node's
// /24, the bridge's address as the Pods' gateway, and hairpin mode so a Pod
// reaches itself through a Service. IP allocations live in the node's
// directory.
func (n *Node) cniConfig() ([]byte, error) {
	in, i := n.cfg.Instance, n.cfg.Index
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "sandbox",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": bridgeName(i), "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": in.NodeCIDR(i).String(), "gateway": in.NodeGateway(i).String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(n.dir, "cni", "ipam"),
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletConfig is node i's KubeletConfiguration. What differs from a
// kubelet's defaults, and why:
//   - cgroupRoot is the node's own cgroup, so nodes never share Pod cgroups;
//     cgroupfs drives them, and v1 hosts are accepted.
//   - No iptables chains of the kubelet's own, no swap check, no image
//     garbage collection (images cannot be pulled again here), no disk or
//     memory eviction (a busy development disk must not evict Pods).
//   - Quicker heartbeats (a 2 s lease renewal, 2 s status updates) so a
//     stopped node is seen in seconds; a 5 s sync so volume contents follow
//     their objects quickly.
func (n *Node) kubeletConfig() ([]byte, error) {
	in, i := n.cfg.Instance, n.cfg.Index
	pki := n.pkiDir()
	conf := map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"address":            in.NodeIP(i).String(),
		"port":               instance.KubeletPort,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        0,
		"tlsCertFile":        filepath.Join(pki, "kubelet.crt"),
		"tlsPrivateKeyFile":  filepath.Join(pki, "kubelet.key"),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": n.cfg.CAFile},
		},
		"authorization":                 map[string]any{"mode": "AlwaysAllow"},
		"cgroupDriver":                  "cgroupfs",
		"cgroupRoot":                    n.cgroup(),
		"failCgroupV1":                  false,
		"containerRuntimeEndpoint":      "unix://" + n.socket(),
		"clusterDomain":                 "cluster.local",
		"clusterDNS":                    []string{in.DNSServiceIP().String()},
		"resolvConf":                    filepath.Join(n.dir, "resolv.conf"),
		"podLogsDir":                    filepath.Join(n.dir, "pods"),
		"makeIPTablesUtilChains":        false,
		"failSwapOn":                    false,
		"protectKernelDefaults":         false,
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"evictionHard":                  map[string]string{"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%", "imagefs.inodesFree": "0%"},
		"syncFrequency":                 "5s",
		"nodeStatusUpdateFrequency":     "2s",
		"nodeStatusReportFrequency":     "10s",
		"nodeLeaseDurationSeconds":      10,
		"serializeImagePulls":           false,
		"shutdownGracePeriod":           "0s",
		"kubeAPIQPS":                    50,
		"kubeAPIBurst":                  100,
		"enableDebuggingHandlers":       true,
		"localStorageCapacityIsolation": true,
		// Root here cannot lower an OOM score (no CAP_SYS_RESOURCE).
		"oomScoreAdj": 0,
	}
	if n.cfg.MaxBackoff > 0 {
		conf["crashLoopBackOff"] = map[string]string{"maxContainerRestartPeriod": max(n.cfg.MaxBackoff, time.Second).String()}
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletArgs are the flags that have no configuration field.
func (n *Node) kubeletArgs() []string {
	in, i := n.cfg.Instance, n.cfg.Index
	return []string{
		"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(n.pkiDir(), "kubelet.kubeconfig"),
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--hostname-override=" + n.Name(),
		"--node-ip=" + in.NodeIP(i).String(),
		fmt.Sprintf("--node-labels=topology.kubernetes.io/zone=zone-%d", i),
		"--v=1",
	}
}
