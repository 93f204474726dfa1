package node

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

// objectSource reads the Secrets and ConfigMaps a Pod refers to.
type objectSource interface {
	Secret(ns, name string) (*corev1.Secret, error)
	ConfigMap(ns, name string) (*corev1.ConfigMap, error)
}

// podFacts are what the node knows about a Pod beyond its spec.
type podFacts struct {
	PodIP    string
	HostIP   string
	NodeName string
	APIHost  string
	APIPort  int
	// NodeCPU and NodeMemory stand in for unset limits in resourceFieldRef.
	NodeCPU    resource.Quantity
	NodeMemory resource.Quantity
}

// envList keeps variables in first-definition order while later
// definitions replace the value, as the kubelet builds a container's
// environment.
type envList struct {
	order  []string
	values map[string]string
}

func newEnvList() *envList { return &envList{values: map[string]string{}} }

func (e *envList) set(k, v string) {
	if _, ok := e.values[k]; !ok {
		e.order = append(e.order, k)
	}
	e.values[k] = v
}

func (e *envList) lookup(k string) (string, bool) {
	v, ok := e.values[k]
	return v, ok
}

func (e *envList) list() []string {
	out := make([]string, 0, len(e.order))
	for _, k := range e.order {
		out = append(out, k+"="+e.values[k])
	}
	return out
}

// resolveEnv builds a container's environment: the image's, the API
// server's address, envFrom and env (with valueFrom and $(VAR) expansion).
// A missing non-optional reference is an error the node reports as
// CreateContainerConfigError.
func resolveEnv(pod *corev1.Pod, c *corev1.Container, imageEnv []string, facts podFacts, src objectSource) ([]string, error) {
	out := newEnvList()
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		out.set(k, v)
	}
	// Expansion sees only what Kubernetes defines, not the image's variables.
	defined := newEnvList()
	setBoth := func(k, v string) {
		out.set(k, v)
		defined.set(k, v)
	}
	svc := serviceEnv(facts)
	for _, k := range sortedKeys(svc) {
		setBoth(k, svc[k])
	}
	for _, from := range c.EnvFrom {
		vars, err := envFromSource(pod.Namespace, from, src)
		if err != nil {
			return nil, err
		}
		for _, kv := range vars {
			setBoth(kv[0], kv[1])
		}
	}
	for _, ev := range c.Env {
		v, ok, err := envValueOf(pod, c, ev, facts, src, defined)
		if err != nil {
			return nil, err
		}
		if ok {
			setBoth(ev.Name, v)
		}
	}
	return out.list(), nil
}

// serviceEnv is the in-cluster address of the API server. Other Services'
// variables are not set (there is no kube-proxy to reach a cluster IP).
func serviceEnv(f podFacts) map[string]string {
	if f.APIHost == "" {
		return nil
	}
	port := strconv.Itoa(f.APIPort)
	addr := "tcp://" + f.APIHost + ":" + port
	return map[string]string{
		"KUBERNETES_SERVICE_HOST":       f.APIHost,
		"KUBERNETES_SERVICE_PORT":       port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port,
		"KUBERNETES_PORT":               addr,
		"KUBERNETES_PORT_443_TCP":       addr,
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_443_TCP_PORT":  port,
		"KUBERNETES_PORT_443_TCP_ADDR":  f.APIHost,
	}
}

// envFromSource returns the pairs of one envFrom entry in key order.
func envFromSource(ns string, from corev1.EnvFromSource, src objectSource) ([][2]string, error) {
	var data map[string]string
	switch {
	case from.ConfigMapRef != nil:
		cm, err := src.ConfigMap(ns, from.ConfigMapRef.Name)
		if err != nil {
			if optional(from.ConfigMapRef.Optional) && apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("configmap %q: %w", from.ConfigMapRef.Name, err)
		}
		data = cm.Data
	case from.SecretRef != nil:
		s, err := src.Secret(ns, from.SecretRef.Name)
		if err != nil {
			if optional(from.SecretRef.Optional) && apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("secret %q: %w", from.SecretRef.Name, err)
		}
		data = map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
	}
	keys := sortedKeys(data)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, [2]string{from.Prefix + k, data[k]})
	}
	return out, nil
}

// envValueOf resolves one env entry; ok is false for a missing optional key.
func envValueOf(pod *corev1.Pod, c *corev1.Container, ev corev1.EnvVar, facts podFacts, src objectSource, defined *envList) (string, bool, error) {
	if ev.ValueFrom == nil {
		return expand(ev.Value, defined.lookup), true, nil
	}
	vf := ev.ValueFrom
	switch {
	case vf.FieldRef != nil:
		v, err := fieldValue(pod, vf.FieldRef.FieldPath, facts)
		return v, err == nil, err
	case vf.ResourceFieldRef != nil:
		v, err := resourceValue(c, vf.ResourceFieldRef, facts)
		return v, err == nil, err
	case vf.SecretKeyRef != nil:
		return secretKey(pod.Namespace, vf.SecretKeyRef, src)
	case vf.ConfigMapKeyRef != nil:
		return configMapKey(pod.Namespace, vf.ConfigMapKeyRef, src)
	}
	return "", false, fmt.Errorf("env %s: unsupported valueFrom", ev.Name)
}

func secretKey(ns string, ref *corev1.SecretKeySelector, src objectSource) (string, bool, error) {
	s, err := src.Secret(ns, ref.Name)
	if err != nil {
		if optional(ref.Optional) && apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		if optional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
	}
	return string(v), true, nil
}

func configMapKey(ns string, ref *corev1.ConfigMapKeySelector, src objectSource) (string, bool, error) {
	cm, err := src.ConfigMap(ns, ref.Name)
	if err != nil {
		if optional(ref.Optional) && apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %q: %w", ref.Name, err)
	}
	v, ok := cm.Data[ref.Key]
	if !ok {
		if optional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
	}
	return v, true, nil
}

// fieldValue resolves a downward API field path.
func fieldValue(pod *corev1.Pod, path string, f podFacts) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return f.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return f.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return f.HostIP, nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap renders labels or annotations like the downward API volume.
func formatMap(m map[string]string) string {
	keys := sortedKeys(m)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		lines = append(lines, k+"="+strconv.Quote(m[k]))
	}
	return strings.Join(lines, "\n")
}

// resourceValue resolves a resourceFieldRef, rounding up like the kubelet
// and using the node's capacity for an unset limit.
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector, f podFacts) (string, error) {
	q, err := containerResource(c, ref.Resource, f)
	if err != nil {
		return "", err
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if strings.HasSuffix(ref.Resource, "cpu") {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

func containerResource(c *corev1.Container, name string, f podFacts) (resource.Quantity, error) {
	kind, res, ok := strings.Cut(name, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return resource.Quantity{}, fmt.Errorf("unsupported resourceFieldRef %q", name)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	if q, ok := list[corev1.ResourceName(res)]; ok {
		return q, nil
	}
	switch {
	case kind == "requests":
		return resource.Quantity{}, nil
	case res == "cpu":
		return f.NodeCPU, nil
	case res == "memory":
		return f.NodeMemory, nil
	}
	return resource.Quantity{}, fmt.Errorf("unsupported resourceFieldRef %q", name)
}

// expand replaces $(VAR) with its value when defined, keeps unknown
// references as written, and turns $$ into $, as Kubernetes does for env,
// command and args.
func expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func optional(p *bool) bool { return p != nil && *p }
