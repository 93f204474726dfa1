package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type probeKind string

const (
	startupProbe   probeKind = "Startup"
	livenessProbe  probeKind = "Liveness"
	readinessProbe probeKind = "Readiness"
)

// startProbes runs the container's probes for this instance; they stop
// when it exits. Liveness and readiness wait for the startup probe.
func (w *podWorker) startProbes(pod *corev1.Pod, c *ctr, p *proc) {
	ctx, cancel := context.WithCancel(context.Background())
	p.stopProbes = cancel
	spec := c.spec
	if spec.StartupProbe != nil {
		go w.probeLoop(ctx, pod, c, p, startupProbe, spec.StartupProbe)
	}
	if spec.LivenessProbe != nil {
		go w.probeLoop(ctx, pod, c, p, livenessProbe, spec.LivenessProbe)
	}
	if spec.ReadinessProbe != nil {
		go w.probeLoop(ctx, pod, c, p, readinessProbe, spec.ReadinessProbe)
	}
}

// probeThresholds are a probe's settings with the API's defaults.
type probeThresholds struct {
	initial, period, timeout time.Duration
	success, failure         int
}

func thresholds(pr *corev1.Probe) probeThresholds {
	t := probeThresholds{
		initial: time.Duration(pr.InitialDelaySeconds) * time.Second,
		period:  10 * time.Second, timeout: time.Second, success: 1, failure: 3,
	}
	if pr.PeriodSeconds > 0 {
		t.period = time.Duration(pr.PeriodSeconds) * time.Second
	}
	if pr.TimeoutSeconds > 0 {
		t.timeout = time.Duration(pr.TimeoutSeconds) * time.Second
	}
	if pr.SuccessThreshold > 0 {
		t.success = int(pr.SuccessThreshold)
	}
	if pr.FailureThreshold > 0 {
		t.failure = int(pr.FailureThreshold)
	}
	return t
}

func (w *podWorker) probeLoop(ctx context.Context, pod *corev1.Pod, c *ctr, p *proc, kind probeKind, pr *corev1.Probe) {
	t := thresholds(pr)
	if kind != startupProbe && !w.waitStarted(ctx, c, p) {
		return
	}
	if !sleepCtx(ctx, time.Until(p.startedAt.Add(t.initial))) {
		return
	}
	var successes, failures int
	for {
		ok, msg := w.check(ctx, pod, p, pr, t.timeout)
		if ctx.Err() != nil {
			return
		}
		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
			w.n.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind, msg)
		}
		if done := w.probeResult(pod, c, p, kind, pr, t, successes, failures); done {
			return
		}
		if !sleepCtx(ctx, t.period) {
			return
		}
	}
}

// probeResult applies the counts; it reports whether the loop should end.
func (w *podWorker) probeResult(pod *corev1.Pod, c *ctr, p *proc, kind probeKind, pr *corev1.Probe, t probeThresholds, successes, failures int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.proc != p {
		return true
	}
	switch {
	case kind == readinessProbe && successes >= t.success && !c.ready:
		c.ready = true
		defer w.poke()
	case kind == readinessProbe && failures >= t.failure && c.ready:
		c.ready = false
		defer w.poke()
	case kind == startupProbe && successes >= t.success:
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
		defer w.poke()
		return true
	case kind != readinessProbe && failures >= t.failure:
		grace := gracePeriod(pod, false)
		if pr.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
		}
		w.n.recorder.Eventf(pod, corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, strings.ToLower(string(kind)))
		go stopContainer(p, grace)
		return true
	}
	return false
}

func (w *podWorker) waitStarted(ctx context.Context, c *ctr, p *proc) bool {
	for {
		w.mu.Lock()
		started, current := c.started, c.proc == p
		w.mu.Unlock()
		if !current {
			return false
		}
		if started {
			return true
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// check runs one probe from the host, as the kubelet does: HTTP and TCP
// dial the Pod IP, exec runs inside the container.
func (w *podWorker) check(ctx context.Context, pod *corev1.Pod, p *proc, pr *corev1.Probe, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w.mu.Lock()
	ip := w.podIP
	w.mu.Unlock()
	h := pr.ProbeHandler
	switch {
	case h.Exec != nil:
		code, out, err := w.n.runExec(ctx, p.execBase, h.Exec.Command)
		if err != nil {
			return false, err.Error()
		}
		return code == 0, fmt.Sprintf("command exited with %d: %s", code, strings.TrimSpace(out))
	case h.HTTPGet != nil:
		return httpProbe(ctx, pod, h.HTTPGet, ip)
	case h.TCPSocket != nil:
		port, err := resolvePort(pod, h.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = ip
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	case h.GRPC != nil:
		return grpcProbe(ctx, h.GRPC, ip)
	}
	return false, "probe has no handler"
}

func httpProbe(ctx context.Context, pod *corev1.Pod, g *corev1.HTTPGetAction, ip string) (bool, string) {
	port, err := resolvePort(pod, g.Port)
	if err != nil {
		return false, err.Error()
	}
	host := g.Host
	if host == "" {
		host = ip
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+path, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/sandbox")
	for _, hdr := range g.HTTPHeaders {
		if strings.EqualFold(hdr.Name, "host") {
			req.Host = hdr.Value
			continue
		}
		req.Header.Add(hdr.Name, hdr.Value)
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes never verify, like the kubelet
		DisableKeepAlives: true,
	}}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, ""
	}
	return false, "HTTP probe failed with statuscode: " + strconv.Itoa(resp.StatusCode)
}

func grpcProbe(ctx context.Context, g *corev1.GRPCAction, ip string) (bool, string) {
	conn, err := grpc.NewClient(net.JoinHostPort(ip, strconv.Itoa(int(g.Port))), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return false, err.Error()
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, "service unhealthy (responded with " + resp.GetStatus().String() + ")"
	}
	return true, ""
}

// resolvePort turns a named port into its number from the Pod's containers.
func resolvePort(pod *corev1.Pod, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in the Pod's containers", p.StrVal)
}
