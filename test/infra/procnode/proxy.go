//go:build linux

package procnode

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ServiceCIDR holds the Services' cluster IPs (envtest's range), local to
// the namespace's loopback device like PodCIDR.
const ServiceCIDR = "10.0.0.0/24"

// proxy is the nodes' kube-proxy, in user space: it listens on every
// Service's cluster IP and port and sends each new connection to a ready
// endpoint of the Service's EndpointSlices, chosen at random, as
// kube-proxy's rules do. What a client meets through a Service is then
// exactly what the EndpointSlice controller published.
type proxy struct {
	mu        sync.Mutex
	listeners map[string]net.Listener // by clusterIP:port
	backends  map[string][]string     // by clusterIP:port: ready endpoint addresses
}

func newProxy() *proxy {
	return &proxy{listeners: map[string]net.Listener{}, backends: map[string][]string{}}
}

// sync opens and closes listeners for the Services and refreshes where
// they lead.
func (p *proxy) sync(ctx context.Context, k *kubelet) {
	svcs, err := k.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	slices, err := k.cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	backends := map[string][]string{}
	for _, svc := range svcs.Items {
		for key, eps := range serviceBackends(&svc, slices.Items) {
			backends[key] = eps
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = backends
	for key := range backends {
		if _, ok := p.listeners[key]; ok {
			continue
		}
		ln, err := net.Listen("tcp", key)
		if err != nil {
			continue
		}
		p.listeners[key] = ln
		go p.serve(key, ln)
	}
	for key, ln := range p.listeners {
		if _, ok := backends[key]; !ok {
			_ = ln.Close()
			delete(p.listeners, key)
		}
	}
}

// serviceBackends maps each TCP port of a Service with a cluster IP
// (clusterIP:port) to its ready endpoints.
func serviceBackends(svc *corev1.Service, slices []discoveryv1.EndpointSlice) map[string][]string {
	ip := svc.Spec.ClusterIP
	// The kubernetes Service's endpoint, the API server, listens on
	// loopback only; Pods reach it through KUBERNETES_SERVICE_HOST.
	if ip == "" || ip == corev1.ClusterIPNone || (svc.Namespace == "default" && svc.Name == "kubernetes") {
		return nil
	}
	out := map[string][]string{}
	for _, port := range svc.Spec.Ports {
		if port.Protocol != corev1.ProtocolTCP && port.Protocol != "" {
			continue
		}
		key := net.JoinHostPort(ip, strconv.Itoa(int(port.Port)))
		out[key] = readyEndpoints(slices, svc.Namespace, svc.Name, port.Name)
	}
	return out
}

// readyEndpoints are the addresses (ip:port) of a Service port's ready
// endpoints.
func readyEndpoints(slices []discoveryv1.EndpointSlice, ns, svc, portName string) []string {
	var out []string
	for _, s := range slices {
		if s.Namespace != ns || s.Labels[discoveryv1.LabelServiceName] != svc {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if ptr.Deref(p.Name, "") == portName && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, false) {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	return out
}

func (p *proxy) serve(key string, ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		eps := p.backends[key]
		p.mu.Unlock()
		if len(eps) == 0 {
			// No ready endpoint: kube-proxy rejects the connection.
			_ = conn.Close()
			continue
		}
		go splice(conn, eps[rand.IntN(len(eps))])
	}
}

func splice(client net.Conn, backend string) {
	defer func() { _ = client.Close() }()
	server, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer func() { _ = server.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
}

func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, ln := range p.listeners {
		_ = ln.Close()
		delete(p.listeners, key)
	}
}
