// Package portforward reaches a port of a Pod through the API server, as
// `kubectl port-forward` does: kubectl-etcd and etcd-migrate dial etcd
// this way from outside the cluster.
package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
)

// Forwarder opens a local port that reaches a port of a Pod. stop closes it.
type Forwarder interface {
	Forward(ctx context.Context, pod *corev1.Pod, port int) (local int, stop func(), err error)
}

// APIForwarder tunnels through the API server's port-forward subresource
// (SPDY), as `kubectl port-forward` does: nothing but a kubeconfig is needed,
// the Pod network need not be reachable from here.
type APIForwarder struct {
	config *rest.Config
	pods   rest.Interface
}

// NewAPIForwarder returns a Forwarder through the API server of config.
func NewAPIForwarder(config *rest.Config) (*APIForwarder, error) {
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &APIForwarder{config: config, pods: cs.CoreV1().RESTClient()}, nil
}

// ErrPortForward marks a port-forward the API server or the node refused.
var ErrPortForward = errors.New("port-forward refused")

// Forward opens a local port to the Pod's port; stop closes it.
func (f *APIForwarder) Forward(ctx context.Context, pod *corev1.Pod, port int) (int, func(), error) {
	transport, upgrader, err := spdy.RoundTripperFor(f.config)
	if err != nil {
		return 0, nil, err
	}
	url := f.pods.Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)

	// client-go reports errors of single forwarded connections to the
	// logger of its context; the etcd call that used the connection fails
	// and says so, so they are not printed between the command's output.
	fwCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(fwCtx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return 0, nil, fmt.Errorf("%w: pod %s/%s port %d: %s", ErrPortForward, pod.Namespace, pod.Name, port, explainForwardError(err))
	case <-ctx.Done():
		cancel()
		return 0, nil, fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err == nil && len(ports) != 1 {
		err = fmt.Errorf("%d ports forwarded", len(ports))
	}
	if err != nil {
		cancel()
		return 0, nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %w", pod.Namespace, pod.Name, err)
	}
	return int(ports[0].Local), cancel, nil
}

// explainForwardError turns the API server's upgrade failure into advice.
func explainForwardError(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Forbidden") || strings.Contains(msg, "forbidden"):
		return msg + " (your user needs the create verb on pods/portforward in this namespace)"
	case strings.Contains(msg, "does not have a host assigned") || strings.Contains(msg, "not running"):
		return msg + " (the Pod is not running)"
	}
	return msg
}
