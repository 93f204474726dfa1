package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Stream timeouts of the kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// kubeletMux serves the parts of the kubelet API that kube-apiserver
// proxies for kubectl: logs, exec and port-forward.
func (n *Node) kubeletMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", n.handleLogs)
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", n.handleExec)
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", n.handleExec)
	mux.HandleFunc("/portForward/{ns}/{pod}", n.handlePortForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", n.handlePortForward)
	return mux
}

func (n *Node) handleLogs(w http.ResponseWriter, r *http.Request) {
	ns, podName, name := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	pw, ok := n.worker(ns, podName)
	if !ok {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running on %s", ns, podName, n.name), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	path, running, err := pw.logTarget(name, q.Get("previous") == "true")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fw := &flushWriter{w: w}
	if err := readLog(r.Context(), path, parseLogOptions(q), fw, running); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// flushWriter pushes followed log lines to the client as they come.
type flushWriter struct{ w http.ResponseWriter }

func (f *flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f *flushWriter) Flush() {
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// logTarget finds the log file of a container's current or previous
// instance and a function telling whether that instance still runs.
func (w *podWorker) logTarget(name string, previous bool) (string, func() bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.findCtr(name)
	if c == nil {
		return "", nil, fmt.Errorf("container %s is not valid for pod %s", name, w.name)
	}
	if !c.everStarted {
		return "", nil, fmt.Errorf("container %q in pod %q is waiting to start: %s", name, w.name, waitingReason(c))
	}
	instance := c.restartCount
	if previous {
		if instance == 0 {
			return "", nil, fmt.Errorf("previous terminated container %q in pod %q not found", name, w.name)
		}
		instance--
	}
	p := c.proc
	running := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !previous && c.proc == p && p != nil
	}
	return filepath.Join(w.logDir, name, itoa(instance)+".log"), running, nil
}

func waitingReason(c *ctr) string {
	if c.state.Waiting != nil {
		return c.state.Waiting.Reason
	}
	return "ContainerCreating"
}

func (w *podWorker) findCtr(name string) *ctr {
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if c.spec.Name == name {
			return c
		}
	}
	return nil
}

func (n *Node) handleExec(w http.ResponseWriter, r *http.Request) {
	ns, podName, name := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	remotecommand.ServeExec(w, r, &executor{n: n}, ns+"/"+podName, r.PathValue("uid"), name, cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (n *Node) handlePortForward(w http.ResponseWriter, r *http.Request) {
	ns, podName := r.PathValue("ns"), r.PathValue("pod")
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, &executor{n: n}, ns+"/"+podName, r.PathValue("uid"), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// podByKey resolves "ns/name" to the running worker.
func (n *Node) podByKey(key string) (*podWorker, error) {
	ns, name, _ := strings.Cut(key, "/")
	w, ok := n.worker(ns, name)
	if !ok {
		return nil, fmt.Errorf("pod %s is not running on %s", key, n.name)
	}
	return w, nil
}

func dialPod(w *podWorker, port int32) (net.Conn, error) {
	w.mu.Lock()
	ip := w.podIP
	w.mu.Unlock()
	if ip == "" {
		return nil, fmt.Errorf("pod %s/%s has no IP yet", w.namespace, w.name)
	}
	return net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))), 5*time.Second)
}
