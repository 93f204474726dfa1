//go:build linux

package procnode

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// kubelet runs the Pods of every node of the environment.
type kubelet struct {
	cs        kubernetes.Interface
	cfg       Config
	hostsFile string
	// apiHost and apiPort are where a Pod's in-cluster client reaches the
	// API server: the kubernetes Service's address, had it a kube-proxy.
	apiHost, apiPort string

	mu     sync.Mutex
	images map[string]Image
	pods   map[types.UID]*podRunner
	nextIP uint32
	hosts  string

	logServer *http.Server
	logPort   int
	// started is set once run runs (Down waits for it then).
	started bool
	proxy   *proxy
}

func newKubelet(cs kubernetes.Interface, cfg Config, rc *rest.Config, hostsFile string) *kubelet {
	k := &kubelet{cs: cs, cfg: cfg, hostsFile: hostsFile, images: map[string]Image{}, pods: map[types.UID]*podRunner{}, proxy: newProxy()}
	if u, err := url.Parse(rc.Host); err == nil {
		k.apiHost, k.apiPort = u.Hostname(), u.Port()
	}
	for ref, img := range cfg.Images {
		k.images[ref] = img
	}
	for ref, img := range etcdImages(cfg.BinDir) {
		k.images[ref] = img
	}
	return k
}

// etcdImages are the etcd releases of the toolchain, as the sandbox has
// them: quay.io/coreos/etcd:v<version> with etcd, etcdctl and etcdutl in
// /usr/local/bin.
func etcdImages(bin string) map[string]Image {
	out := map[string]Image{}
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(bin), "etcd", "v*"))
	for _, dir := range dirs {
		img := Image{Files: map[string]string{}, Entrypoint: []string{"/usr/local/bin/etcd"},
			Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
		for _, f := range []string{"etcd", "etcdctl", "etcdutl"} {
			img.Files["/usr/local/bin/"+f] = filepath.Join(dir, f)
		}
		out["quay.io/coreos/etcd:"+filepath.Base(dir)] = img
	}
	return out
}

func (k *kubelet) addImage(ref string, img Image) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.images[ref] = img
}

func (k *kubelet) image(ref string) (Image, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	img, ok := k.images[ref]
	return img, ok
}

func nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// registerNodes creates the nodes, Ready, with room for every test's Pods.
func (k *kubelet) registerNodes(ctx context.Context) error {
	port, err := k.serveLogs()
	if err != nil {
		return err
	}
	k.logPort = port
	for i := range k.cfg.Nodes {
		name := nodeName(i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
		}}}
		created, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("registering node %s: %w", name, err)
		}
		room := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("64Gi"),
			corev1.ResourcePods: resource.MustParse("250"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		}
		now := metav1.Now()
		created.Status = corev1.NodeStatus{
			Capacity: room, Allocatable: room, Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "procnode runs this node's Pods as processes", LastHeartbeatTime: now, LastTransitionTime: now}},
			// No host name: the API server would dial it to reach the logs.
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.logPort)}},
			NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "procnode", OperatingSystem: "linux", Architecture: "amd64"},
		}
		ready, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("marking node %s Ready: %w", name, err)
		}
		// Admission taints a new node not-ready; the node lifecycle
		// controller, left out here (it would wait for heartbeats), lifts
		// the taint once the node is Ready.
		ready.Spec.Taints = nil
		if _, err := k.cs.CoreV1().Nodes().Update(ctx, ready, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("untainting node %s: %w", name, err)
		}
	}
	return nil
}

func (k *kubelet) ourNode(name string) bool {
	for i := range k.cfg.Nodes {
		if nodeName(i) == name {
			return true
		}
	}
	return false
}

// run syncs the nodes until ctx ends, then stops every Pod's processes.
func (k *kubelet) run(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		k.syncPods(ctx)
		k.syncHosts(ctx)
		k.proxy.sync(ctx, k)
		select {
		case <-ctx.Done():
			k.proxy.stop()
			k.stopAll()
			if k.logServer != nil {
				_ = k.logServer.Close()
			}
			return
		case <-tick.C:
		}
	}
}

func (k *kubelet) syncPods(ctx context.Context) {
	list, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		if !k.ourNode(pod.Spec.NodeName) {
			continue
		}
		seen[pod.UID] = true
		k.mu.Lock()
		r := k.pods[pod.UID]
		k.mu.Unlock()
		switch {
		case r != nil:
			r.observe(pod)
		case pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			if pod.DeletionTimestamp != nil {
				k.remove(ctx, pod.Namespace, pod.Name, pod.UID)
			}
		default:
			r = k.startPod(pod)
			k.mu.Lock()
			k.pods[pod.UID] = r
			k.mu.Unlock()
		}
	}
	// A Pod deleted with no grace at all is gone before its processes.
	k.mu.Lock()
	var gone []*podRunner
	for uid, r := range k.pods {
		if !seen[uid] {
			gone = append(gone, r)
			delete(k.pods, uid)
		}
	}
	k.mu.Unlock()
	for _, r := range gone {
		r.kill()
	}
}

// remove deletes a Pod whose processes have stopped, as the kubelet does
// once a Pod's containers are gone.
func (k *kubelet) remove(ctx context.Context, ns, name string, uid types.UID) {
	err := k.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return
	}
}

func (k *kubelet) forget(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, uid)
}

func (k *kubelet) stopAll() {
	k.mu.Lock()
	all := make([]*podRunner, 0, len(k.pods))
	for _, r := range k.pods {
		all = append(all, r)
	}
	k.pods = map[types.UID]*podRunner{}
	k.mu.Unlock()
	for _, r := range all {
		r.kill()
	}
}

// allocateIP gives a Pod an address of PodCIDR of its own; addresses are
// not reused within a run.
func (k *kubelet) allocateIP() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextIP++
	n := k.nextIP + 1
	return fmt.Sprintf("10.244.%d.%d", n>>8&0xff, n&0xff)
}

func (k *kubelet) podLog(ns, name, container string) string {
	r := k.runnerOf(ns, name)
	if r == nil {
		return ""
	}
	b, _ := os.ReadFile(r.logPath(container))
	return string(b)
}

// syncHosts writes the names cluster DNS would answer: a Pod with a
// hostname and a subdomain naming a headless Service that selects it, by
// <hostname>.<subdomain>.<namespace>.svc (ready or not as the Service
// publishes them); a headless Service by its ready Pods; a Service with a
// cluster IP by that IP, where the proxy listens.
func (k *kubelet) syncHosts(ctx context.Context) {
	pods, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	svcs, err := k.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	var lines []string
	for _, svc := range svcs.Items {
		lines = append(lines, serviceHosts(&svc, pods.Items)...)
	}
	slices.Sort(lines)
	content := hostsHeader + strings.Join(lines, "")
	if content == k.hosts {
		return
	}
	// Written in place: /etc/hosts of every process is bound to this file.
	if err := os.WriteFile(k.hostsFile, []byte(content), 0o644); err == nil {
		k.hosts = content
	}
}

// serviceHosts are the hosts lines of one Service.
func serviceHosts(svc *corev1.Service, pods []corev1.Pod) []string {
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		if svc.Spec.ClusterIP == "" {
			return nil
		}
		return []string{hostsLine(svc.Spec.ClusterIP, svc.Name+"."+svc.Namespace)}
	}
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var lines []string
	for _, p := range pods {
		if p.Namespace != svc.Namespace || p.Status.PodIP == "" || p.DeletionTimestamp != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if !podReady(&p) && !svc.Spec.PublishNotReadyAddresses {
			continue
		}
		if p.Spec.Hostname != "" && p.Spec.Subdomain == svc.Name {
			lines = append(lines, hostsLine(p.Status.PodIP, p.Spec.Hostname+"."+svc.Name+"."+svc.Namespace))
		}
		lines = append(lines, hostsLine(p.Status.PodIP, svc.Name+"."+svc.Namespace))
	}
	return lines
}

func hostsLine(ip, name string) string {
	return fmt.Sprintf("%s %s.svc %s.svc.cluster.local\n", ip, name, name)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
