package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/portforward"
)

// deps is everything a session reaches out through; tests replace them.
type deps struct {
	kube      client.Client
	namespace string
	forwarder portforward.Forwarder
	dial      func(context.Context, etcd.Config) (etcd.Maintenance, error)
	// logs reads a Pod's container's log; nil where logs cannot be read.
	logs func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error)
}

// session is one command's view of its target: one Pod (-p), or every member
// of an EtcdCluster (-c). Connections to members are opened on first use
// and closed together.
type session struct {
	deps
	cluster *v1alpha2.EtcdCluster  // nil for a Pod the operator did not create
	pod     *corev1.Pod            // the -p Pod; nil in cluster mode
	pods    map[string]*corev1.Pod // member Pods known so far, by name
	sec     security

	podID uint64 // the -p Pod's etcd member ID, once read
	// progressTo shows progress on w if it is a terminal.
	progressTo func(w io.Writer) *progress

	mu      sync.Mutex
	conns   map[string]*conn
	primary *conn
	stops   []func()
}

// conn is a client to one member through its own port-forward.
type conn struct {
	pod      *corev1.Pod
	url      string // the member's advertised client URL
	endpoint string // the same URL with the forwarded local port
	client   etcd.Maintenance
}

var errNoTarget = usageError("name the etcd Pod with -p/--pod or the EtcdCluster with -c/--cluster")

// openSession resolves the target and how to authenticate to it.
func openSession(ctx context.Context, d deps, o *Options) (*session, error) {
	s := &session{deps: d, pods: map[string]*corev1.Pod{}, conns: map[string]*conn{}}
	switch {
	case o.Pod != "" && o.Cluster != "":
		return nil, usageError("-p/--pod and -c/--cluster exclude each other")
	case o.Pod != "":
		if err := s.resolvePod(ctx, o.Pod); err != nil {
			return nil, err
		}
	case o.Cluster != "":
		if err := s.resolveCluster(ctx, o.Cluster); err != nil {
			return nil, err
		}
	default:
		return nil, errNoTarget
	}
	var err error
	if s.sec.TLS, s.sec.TLSFrom, err = discoverTLS(ctx, s.kube, s.cluster, s.pod); err != nil {
		return nil, err
	}
	if s.sec.Username, s.sec.Password, s.sec.CredsFrom, err = discoverCredentials(ctx, s.kube, s.namespace, o.CredentialsSecret, s.cluster); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *session) resolvePod(ctx context.Context, name string) error {
	pod := &corev1.Pod{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %q not found in namespace %q", name, s.namespace)
		}
		return fmt.Errorf("reading pod %s: %w", name, err)
	}
	s.pod = pod
	s.pods[pod.Name] = pod
	clusterName := pod.Labels[manifest.LabelCluster]
	if clusterName == "" {
		return nil
	}
	c := &v1alpha2.EtcdCluster{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: clusterName}, c)
	switch {
	case apierrors.IsNotFound(err):
		return nil // a Pod with the label but no cluster: treat it as foreign
	case err != nil:
		return fmt.Errorf("reading etcdcluster %s of pod %s: %w", clusterName, name, err)
	}
	s.cluster = c
	return s.listClusterPods(ctx)
}

func (s *session) resolveCluster(ctx context.Context, name string) error {
	c := &v1alpha2.EtcdCluster{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("etcdcluster %q not found in namespace %q (kubectl get etcdclusters -n %s lists them)", name, s.namespace, s.namespace)
		}
		return fmt.Errorf("reading etcdcluster %s: %w", name, err)
	}
	s.cluster = c
	return s.listClusterPods(ctx)
}

func (s *session) listClusterPods(ctx context.Context) error {
	list := &corev1.PodList{}
	if err := s.kube.List(ctx, list, client.InNamespace(s.namespace), client.MatchingLabels(manifest.ClusterSelector(s.cluster.Name))); err != nil {
		return fmt.Errorf("listing the pods of etcdcluster %s: %w", s.cluster.Name, err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if _, known := s.pods[p.Name]; !known {
			s.pods[p.Name] = p
		}
	}
	return nil
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.client.Close()
	}
	for _, stop := range s.stops {
		stop()
	}
	s.conns, s.stops = map[string]*conn{}, nil
}

// podOf finds the Pod of an etcd member: member Pods are named as the member.
func (s *session) podOf(ctx context.Context, member string) (*corev1.Pod, error) {
	if member == "" {
		return nil, errors.New("the member has not started yet (etcd lists no name for it)")
	}
	s.mu.Lock()
	p, ok := s.pods[member]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	pod := &corev1.Pod{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: member}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no pod named %s in namespace %s", member, s.namespace)
		}
		return nil, err
	}
	s.mu.Lock()
	s.pods[member] = pod
	s.mu.Unlock()
	return pod, nil
}

// connect opens (once) a client to the member in pod, through a port-forward.
func (s *session) connect(ctx context.Context, pod *corev1.Pod) (*conn, error) {
	s.mu.Lock()
	c, ok := s.conns[pod.Name]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	if why := notRunning(pod); why != "" {
		return nil, fmt.Errorf("pod %s is not Ready, and its etcd does not run: %s", pod.Name, why)
	}
	local, stop, err := s.forwarder.Forward(ctx, pod, manifest.ClientPort)
	if err != nil {
		return nil, err
	}
	advertised := advertisedClientURL(pod, s.sec.TLS != nil)
	u, err := url.Parse(advertised)
	if err != nil || u.Hostname() == "" {
		stop()
		return nil, fmt.Errorf("pod %s advertises an unusable client URL %q", pod.Name, advertised)
	}
	// The endpoint keeps the member's own host name, which its server
	// certificate names, and only the port is the forwarded one; the
	// dialer sends that host to the local end of the forward. The scheme
	// follows the TLS found, not the advertised URL.
	scheme := "http"
	if s.sec.TLS != nil {
		scheme = "https"
	}
	endpoint := fmt.Sprintf("%s://%s", scheme, netJoin(u.Hostname(), local))
	cl, err := s.dial(ctx, etcd.Config{
		Endpoints:   []string{endpoint},
		LoginVia:    s.loginVia(ctx, pod),
		TLS:         s.sec.TLS,
		Username:    s.sec.Username,
		Password:    s.sec.Password,
		DialTimeout: 5 * time.Second,
		Resolve:     func(string) (string, bool) { return "127.0.0.1", true },
	})
	if err != nil {
		stop()
		return nil, s.explain(err)
	}
	c = &conn{pod: pod, url: advertised, endpoint: endpoint, client: cl}
	s.mu.Lock()
	s.conns[pod.Name] = c
	s.stops = append(s.stops, stop)
	s.mu.Unlock()
	return c, nil
}

// loginVia is the forwarded endpoint of a Ready voter to log in through
// when pod is not known to be a voter: a learner refuses to log anyone in.
func (s *session) loginVia(ctx context.Context, pod *corev1.Pod) []string {
	if s.sec.Username == "" || pod.Labels[manifest.LabelRole] == manifest.RoleVoter {
		return nil
	}
	s.mu.Lock()
	var voters []*corev1.Pod
	for _, p := range s.pods {
		if p.Name != pod.Name && p.Labels[manifest.LabelRole] == manifest.RoleVoter && isReady(p) {
			voters = append(voters, p)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(voters, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, v := range voters {
		if c, err := s.connect(ctx, v); err == nil {
			return []string{c.endpoint}
		}
	}
	return nil
}

// candidates are the Pods to ask cluster-wide questions, best first: the -p
// Pod alone, or the cluster's Ready voters, then its other members.
func (s *session) candidates() []*corev1.Pod {
	if s.pod != nil {
		return []*corev1.Pod{s.pod}
	}
	var out []*corev1.Pod
	for _, p := range s.pods {
		out = append(out, p)
	}
	rank := func(p *corev1.Pod) int {
		r := 0
		if !isReady(p) {
			r += 2
		}
		if p.Labels[manifest.LabelRole] != manifest.RoleVoter {
			r++
		}
		return r
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// members reads etcd's membership through the first candidate that answers,
// which then serves every cluster-wide call of the session.
func (s *session) members(ctx context.Context) (*conn, *etcd.MemberList, error) {
	var failures []string
	for _, p := range s.candidates() {
		c, list, err := s.membersVia(ctx, p)
		if err == nil {
			return c, list, nil
		}
		if isAuthError(err) {
			return nil, nil, err // every member would say the same
		}
		failures = append(failures, err.Error())
	}
	switch {
	case len(failures) == 1:
		return nil, nil, errors.New(failures[0])
	case len(failures) == 0:
		return nil, nil, fmt.Errorf("etcdcluster %s has no member Pods", s.cluster.Name)
	}
	return nil, nil, fmt.Errorf("no member of etcdcluster %s answered:\n  %s", s.cluster.Name, strings.Join(failures, "\n  "))
}

// podMemberID is the etcd member ID of the -p Pod, which need not be named
// as its member when the operator did not create it.
func (s *session) podMemberID(ctx context.Context) (uint64, error) {
	if s.podID != 0 {
		return s.podID, nil
	}
	c, err := s.connect(ctx, s.pod)
	if err != nil {
		return 0, err
	}
	st, err := timed(ctx, callTimeout, func(ctx context.Context) (*etcd.Status, error) {
		return c.client.Status(ctx, c.endpoint)
	})
	if err != nil {
		return 0, s.explain(err)
	}
	s.podID = st.MemberID
	return s.podID, nil
}

func (s *session) membersVia(ctx context.Context, p *corev1.Pod) (*conn, *etcd.MemberList, error) {
	c, err := s.connect(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	list, err := timed(ctx, callTimeout, c.client.MemberList)
	if err != nil {
		return nil, nil, s.explain(err)
	}
	s.primary = c
	if s.pod != nil {
		if _, err := s.podMemberID(ctx); err != nil {
			return nil, nil, err
		}
	}
	return c, list, nil
}

// callTimeout bounds one etcd call that etcd answers at once.
const callTimeout = 10 * time.Second

// timed runs one etcd call under its own deadline.
func timed[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return call(ctx)
}

// notRunning says why a Pod's etcd cannot answer, or "" when its container
// runs. Readiness is not asked for: a member with an alarm (NOSPACE) fails
// its health check, and that is when it needs looking after most.
func notRunning(p *corev1.Pod) string {
	if p.Status.Phase != corev1.PodRunning {
		return "phase " + string(p.Status.Phase)
	}
	c := etcdContainer(p)
	for _, cs := range p.Status.ContainerStatuses {
		if c == nil || cs.Name != c.Name {
			continue
		}
		switch {
		case cs.State.Waiting != nil:
			return fmt.Sprintf("container %s is waiting (%s, %d restarts)", cs.Name, cs.State.Waiting.Reason, cs.RestartCount)
		case cs.State.Terminated != nil:
			return fmt.Sprintf("container %s terminated (%s)", cs.Name, cs.State.Terminated.Reason)
		}
	}
	return ""
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// advertisedClientURL is the first URL the Pod's etcd advertises to clients
// (its --advertise-client-urls), or a localhost URL when none is found.
func advertisedClientURL(pod *corev1.Pod, secure bool) string {
	if c := etcdContainer(pod); c != nil {
		flags := parseFlags(append(append([]string(nil), c.Command...), c.Args...))
		v, ok := flags["advertise-client-urls"]
		if !ok {
			v = envValue(c, "ETCD_ADVERTISE_CLIENT_URLS")
		}
		if v = strings.TrimSpace(strings.Split(v, ",")[0]); v != "" {
			return expandPodVars(v, pod, c)
		}
	}
	if secure {
		return fmt.Sprintf("https://localhost:%d", manifest.ClientPort)
	}
	return fmt.Sprintf("http://localhost:%d", manifest.ClientPort)
}

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// expandPodVars resolves $(VAR) references the kubelet would expand, for the
// variables whose value the Pod spec itself tells.
func expandPodVars(s string, pod *corev1.Pod, c *corev1.Container) string {
	for _, e := range c.Env {
		value := e.Value
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			switch f.FieldRef.FieldPath {
			case "metadata.name":
				value = pod.Name
			case "metadata.namespace":
				value = pod.Namespace
			case "status.podIP":
				value = pod.Status.PodIP
			}
		}
		s = strings.ReplaceAll(s, "$("+e.Name+")", value)
	}
	return s
}

func netJoin(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}
