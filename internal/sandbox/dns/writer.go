package dns

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// Writer keeps the hosts file of every running Pod current.
type Writer struct {
	pods        corelisters.PodLister
	services    corelisters.ServiceLister
	slices      discoverylisters.EndpointSliceLister
	apiServerIP string

	mu      sync.Mutex
	files   map[types.UID]*hostsFile
	trigger chan struct{}
}

type hostsFile struct {
	self    PodRecord
	path    string
	written string
}

// NewWriter returns a Writer over the informers' listers.
func NewWriter(pods corelisters.PodLister, services corelisters.ServiceLister, slices discoverylisters.EndpointSliceLister, apiServerIP string) *Writer {
	return &Writer{
		pods: pods, services: services, slices: slices, apiServerIP: apiServerIP,
		files: map[types.UID]*hostsFile{}, trigger: make(chan struct{}, 1),
	}
}

// Register starts keeping a Pod's hosts file at path, writing it now.
func (w *Writer) Register(pod *corev1.Pod, ip, path string) {
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	f := &hostsFile{path: path, self: PodRecord{
		Namespace: pod.Namespace, Name: pod.Name, Hostname: hostname, Subdomain: pod.Spec.Subdomain, IP: ip,
	}}
	w.mu.Lock()
	w.files[pod.UID] = f
	w.mu.Unlock()
	w.writeAll()
}

// Unregister stops maintaining a Pod's hosts file and updates the others.
func (w *Writer) Unregister(uid types.UID) {
	w.mu.Lock()
	_, ok := w.files[uid]
	delete(w.files, uid)
	w.mu.Unlock()
	if ok {
		w.Trigger()
	}
}

// Trigger asks for a rewrite; the informers call it on every change.
func (w *Writer) Trigger() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// Run rewrites changed hosts files after each burst of changes (50 ms
// apart at most, so names appear well within a second).
func (w *Writer) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.trigger:
		}
		time.Sleep(50 * time.Millisecond)
		w.writeAll()
	}
}

func (w *Writer) writeAll() {
	world := w.world()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.files {
		content := Render(f.self, world)
		if content == f.written {
			continue
		}
		if err := writeInPlace(f.path, content); err != nil {
			slog.Warn("Writing a hosts file failed; retrying on the next change", "path", f.path, "err", err)
			continue
		}
		f.written = content
	}
}

// writeInPlace rewrites the file without replacing its inode: containers
// have it bind-mounted, and a rename would leave them the old file.
func writeInPlace(path, content string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(len(content))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// world gathers Pods (with their addresses, registered ones first) and
// Services with the endpoints their names resolve to.
func (w *Writer) world() World {
	world := World{APIServerIP: w.apiServerIP}
	w.mu.Lock()
	known := map[string]string{}
	for _, f := range w.files {
		known[f.self.Namespace+"/"+f.self.Name] = f.self.IP
	}
	w.mu.Unlock()
	pods, _ := w.pods.List(labels.Everything())
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ip := known[p.Namespace+"/"+p.Name]
		if ip == "" {
			ip = p.Status.PodIP
		}
		hostname := p.Spec.Hostname
		if hostname == "" {
			hostname = p.Name
		}
		world.Pods = append(world.Pods, PodRecord{Namespace: p.Namespace, Name: p.Name, Hostname: hostname, Subdomain: p.Spec.Subdomain, IP: ip})
	}
	services, _ := w.services.List(labels.Everything())
	for _, s := range services {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		world.Services = append(world.Services, ServiceRecord{
			Namespace: s.Namespace, Name: s.Name, Headless: s.Spec.ClusterIP == corev1.ClusterIPNone,
			IPs: w.endpointIPs(s),
		})
	}
	return world
}

// endpointIPs are the Service's ready endpoint addresses (all of them with
// publishNotReadyAddresses), sorted.
func (w *Writer) endpointIPs(s *corev1.Service) []string {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name})
	list, _ := w.slices.EndpointSlices(s.Namespace).List(sel)
	var ips []string
	for _, es := range list {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range es.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if ready || s.Spec.PublishNotReadyAddresses {
				ips = append(ips, ep.Addresses...)
			}
		}
	}
	slices.Sort(ips)
	return slices.Compact(ips)
}
