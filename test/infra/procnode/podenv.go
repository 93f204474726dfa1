//go:build linux

package procnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// environment is a container's environment as the kubelet composes it:
// the image's, the kubernetes Service's variables, envFrom, then env with
// $(VAR) references to earlier variables expanded.
func (r *podRunner) environment(pod *corev1.Pod, c corev1.Container, img Image) ([]string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range img.Env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	set("HOSTNAME", ptr.Deref(&pod.Spec.Hostname, ""))
	if pod.Spec.Hostname == "" {
		set("HOSTNAME", pod.Name)
	}
	set("KUBERNETES_SERVICE_HOST", r.k.apiHost)
	set("KUBERNETES_SERVICE_PORT", r.k.apiPort)
	set("KUBERNETES_SERVICE_PORT_HTTPS", r.k.apiPort)
	for _, from := range c.EnvFrom {
		data, err := r.envFromData(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, err := r.envValue(ctx, pod, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func (r *podRunner) envFromData(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		s, err := r.k.cs.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(from.SecretRef.Optional, false) {
				return out, nil
			}
			return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	case from.ConfigMapRef != nil:
		cm, err := r.k.cs.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(from.ConfigMapRef.Optional, false) {
				return out, nil
			}
			return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	return out, nil
}

func (r *podRunner) envValue(ctx context.Context, pod *corev1.Pod, c corev1.Container, from *corev1.EnvVarSource) (string, error) {
	switch {
	case from.FieldRef != nil:
		return r.fieldValue(pod, from.FieldRef.FieldPath)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := r.k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(ref.Optional, false) {
				return "", nil
			}
			return "", fmt.Errorf("secret %q not found", ref.Name)
		}
		v, ok := s.Data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), nil
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := r.k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(ref.Optional, false) {
				return "", nil
			}
			return "", fmt.Errorf("configmap %q not found", ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, nil
	case from.ResourceFieldRef != nil:
		return resourceValue(c, from.ResourceFieldRef), nil
	}
	return "", fmt.Errorf("unsupported value source")
}

var mapField = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.+)'\]$`)

// fieldValue reads a downward API field of the Pod.
func (r *podRunner) fieldValue(pod *corev1.Pod, field string) (string, error) {
	switch field {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return r.ip, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	if m := mapField.FindStringSubmatch(field); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("unsupported field path %q", field)
}

// resourceValue reads a container's limit or request; a missing limit is
// the node's allocatable, as the kubelet reports it.
func resourceValue(c corev1.Container, ref *corev1.ResourceFieldSelector) string {
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		if name == "cpu" {
			return "32"
		}
		return strconv.FormatInt(64<<30, 10)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		if name == "cpu" {
			return strconv.FormatInt((q.MilliValue()+999)/1000, 10)
		}
		return strconv.FormatInt(q.Value(), 10)
	}
	return strconv.FormatInt((q.MilliValue()+divisor.MilliValue()-1)/divisor.MilliValue(), 10)
}

// probe runs the container's readiness and liveness probes until done: a
// readiness result sets the container's Ready; liveness failures past the
// threshold stop the process, which the restart policy then restarts.
func (r *podRunner) probe(c corev1.Container, p *process, done chan struct{}) {
	st := &probeState{start: time.Now(), next: map[string]time.Time{}}
	for {
		select {
		case <-done:
			r.setReady(c.Name, false)
			return
		case <-p.exited:
			r.setReady(c.Name, false)
			return
		case <-time.After(200 * time.Millisecond):
		}
		now := time.Now()
		if pr := c.ReadinessProbe; pr != nil && due(pr, st.start, now, st.next, "ready") {
			r.readiness(c, pr, st)
		}
		if pr := c.LivenessProbe; pr != nil && due(pr, st.start, now, st.next, "live") {
			r.liveness(c, pr, p, st)
		}
	}
}

// probeState counts a container's probe results.
type probeState struct {
	start                         time.Time
	next                          map[string]time.Time
	readyFails, readyOK, liveFail int
}

func (r *podRunner) readiness(c corev1.Container, pr *corev1.Probe, st *probeState) {
	if r.check(c, pr) {
		st.readyFails, st.readyOK = 0, st.readyOK+1
		if st.readyOK >= int(max(pr.SuccessThreshold, 1)) {
			r.setReady(c.Name, true)
		}
		return
	}
	st.readyOK, st.readyFails = 0, st.readyFails+1
	if st.readyFails >= int(max(pr.FailureThreshold, 1)) {
		r.setReady(c.Name, false)
	}
}

func (r *podRunner) liveness(c corev1.Container, pr *corev1.Probe, p *process, st *probeState) {
	if r.check(c, pr) {
		st.liveFail = 0
		return
	}
	if st.liveFail++; st.liveFail < int(max(pr.FailureThreshold, 1)) {
		return
	}
	grace := int64(30)
	if pod := r.current(); pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	go p.stop(time.Now().Add(time.Duration(grace) * time.Second))
	st.liveFail = 0
}

func due(pr *corev1.Probe, start, now time.Time, next map[string]time.Time, key string) bool {
	if now.Before(start.Add(time.Duration(pr.InitialDelaySeconds) * time.Second)) {
		return false
	}
	if now.Before(next[key]) {
		return false
	}
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	next[key] = now.Add(period)
	return true
}

// check runs one probe against the Pod's address.
func (r *podRunner) check(c corev1.Container, pr *corev1.Probe) bool {
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	switch {
	case pr.HTTPGet != nil:
		port, ok := resolvePort(c, pr.HTTPGet.Port)
		if !ok {
			return false
		}
		host := pr.HTTPGet.Host
		if host == "" {
			host = r.ip
		}
		scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		client := &http.Client{Timeout: timeout, Transport: insecureTransport}
		resp, err := client.Get(fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), pr.HTTPGet.Path))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case pr.TCPSocket != nil:
		port, ok := resolvePort(c, pr.TCPSocket.Port)
		if !ok {
			return false
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(r.ip, strconv.Itoa(port)), timeout)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	case pr.GRPC != nil:
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(r.ip, strconv.Itoa(int(pr.GRPC.Port))), timeout)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	// Exec probes would run inside the container; none of the Pods this
	// environment runs has one, so one fails rather than passing unseen.
	return false
}

func resolvePort(c corev1.Container, port intstr.IntOrString) (int, bool) {
	if port.Type == intstr.Int {
		return port.IntValue(), true
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}

// insecureTransport is the probes' transport: the kubelet does not verify
// the certificate of an HTTPS probe, and keeps no connection between probes.
var insecureTransport = &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet probes
	DisableKeepAlives: true,
}
