package node

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
)

// ensureSandbox gives the Pod its network namespace, IP, /etc files and
// volumes, once.
func (w *podWorker) ensureSandbox(ctx context.Context, pod *corev1.Pod) error {
	w.mu.Lock()
	haveNet, haveVols := w.net != nil, w.volInfo != nil
	w.mu.Unlock()
	if !haveNet {
		if err := w.setupNetwork(ctx, pod); err != nil {
			return err
		}
	}
	if haveVols {
		return nil
	}
	info, err := w.vols.prepare(ctx, pod)
	if err != nil {
		return fmt.Errorf("MountVolume.SetUp failed: %w", err)
	}
	w.mu.Lock()
	w.volInfo = info
	w.mu.Unlock()
	return nil
}

func (w *podWorker) setupNetwork(ctx context.Context, pod *corev1.Pod) error {
	in := w.n.cfg.Instance
	ip, err := w.n.allocate(w.uid)
	if err != nil {
		return err
	}
	pn := netns.Pod{
		Netns: in.NetnsName(string(w.uid)), Veth: in.VethName(w.n.cfg.Veths.Add(1)),
		Bridge: in.BridgeName(), Addr: netip.PrefixFrom(ip, in.PodCIDR.Bits()),
	}
	if err := netns.Setup(ctx, pn); err != nil {
		w.n.release(w.uid)
		_ = netns.Teardown(ctx, pn)
		return err
	}
	if err := w.writeEtc(pod); err != nil {
		return err
	}
	w.n.cfg.Hosts.Register(pod, ip.String(), w.etcFiles().Hosts)
	now := metav1.Now()
	w.mu.Lock()
	w.net, w.podIP = &pn, ip.String()
	if w.startTime == nil {
		w.startTime = &now
		if pod.Status.StartTime != nil {
			w.startTime = pod.Status.StartTime
		}
	}
	w.mu.Unlock()
	return nil
}

// etcFiles are the Pod's /etc files on the host.
func (w *podWorker) etcFiles() podFiles {
	d := filepath.Join(w.dir, "etc")
	return podFiles{
		Hosts: filepath.Join(d, "hosts"), Resolv: filepath.Join(d, "resolv.conf"),
		NSSwitch: filepath.Join(d, "nsswitch.conf"), Hostname: filepath.Join(d, "hostname"),
	}
}

// writeEtc writes resolv.conf (no name server answers: every name lives in
// the hosts file), nsswitch.conf and hostname; the DNS writer owns hosts.
func (w *podWorker) writeEtc(pod *corev1.Pod) error {
	f := w.etcFiles()
	if err := os.MkdirAll(filepath.Dir(f.Hosts), 0o755); err != nil {
		return err
	}
	resolv := fmt.Sprintf("search %s.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:1\n", pod.Namespace)
	files := map[string]string{
		f.Resolv:   resolv,
		f.NSSwitch: "hosts: files dns\n",
		f.Hostname: podHostname(pod) + "\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// podHostname is spec.hostname or the Pod's name, cut to 63 characters.
func podHostname(pod *corev1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

func netnsPath(name string) string { return netns.Path(name) }

// facts are the Pod's addresses and the node's, for env and probes.
func (w *podWorker) facts() podFacts {
	capacity := w.n.nodeStatus(corev1.NodeStatus{}).Capacity
	return podFacts{
		PodIP: w.podIP, HostIP: w.n.cfg.Instance.BridgeIP().String(), NodeName: w.n.name,
		APIHost: w.n.cfg.Instance.BridgeIP().String(), APIPort: instance.APIServerPort,
		NodeCPU: capacity[corev1.ResourceCPU], NodeMemory: capacity[corev1.ResourceMemory],
	}
}

// Secret and ConfigMap make the node an objectSource over its listers.
func (n *Node) Secret(ns, name string) (*corev1.Secret, error) {
	return n.cfg.Secrets.Secrets(ns).Get(name)
}

// ConfigMap returns a ConfigMap from the informer cache.
func (n *Node) ConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	return n.cfg.ConfigMaps.ConfigMaps(ns).Get(name)
}

func (n *Node) allocate(uid types.UID) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alloc.Allocate(string(uid))
}

func (n *Node) release(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.alloc.Release(string(uid))
}
