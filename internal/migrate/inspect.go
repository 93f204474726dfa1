package migrate

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Forwarder opens a local port that reaches a port of a Pod (the kubectl
// plugin's port-forward through the API server).
type Forwarder interface {
	Forward(ctx context.Context, pod *corev1.Pod, port int) (local int, stop func(), err error)
}

// Env is what the tool talks to.
type Env struct {
	Client    client.Client
	Forwarder Forwarder
	// Dial opens an etcd client; etcd.DialMaintenance unless a test says
	// otherwise.
	Dial func(ctx context.Context, cfg etcd.Config) (etcd.Maintenance, error)
}

// LiveMember is one etcd member with the Pod and claim that hold it.
type LiveMember struct {
	Name    string
	ID      uint64
	PeerURL string
	Learner bool
	Pod     *corev1.Pod
	PVC     *corev1.PersistentVolumeClaim
}

// Live is a legacy cluster as it runs, read afresh by every run of the tool,
// so that a re-run after a crash sees what the last run left.
type Live struct {
	Legacy      *Legacy
	StatefulSet *appsv1.StatefulSet
	Pods        []*corev1.Pod
	ClusterID   uint64
	Members     []LiveMember
	AuthEnabled bool
	// TLS is the certificate material of a legacy cluster with
	// spec.security.tls, read from its Secrets.
	TLS *material
	// Adopted is the new EtcdCluster of the same name, if it exists.
	Adopted *v1alpha2.EtcdCluster
	// Problems stop the adoption of this cluster.
	Problems []string
}

func (lv *Live) refuse(format string, args ...any) {
	lv.Problems = append(lv.Problems, fmt.Sprintf(format, args...))
}

// Inspect reads a legacy cluster's objects and asks its etcd for the
// membership. It changes nothing.
func Inspect(ctx context.Context, env Env, l *Legacy) *Live {
	lv := &Live{Legacy: l}
	if err := lv.readObjects(ctx, env.Client); err != nil {
		lv.refuse("reading its objects: %v", err)
		return lv
	}
	problems := len(lv.Problems)
	if err := lv.readTLS(ctx, env.Client); err != nil {
		lv.refuse("reading its TLS Secrets: %v", err)
	}
	if err := lv.readAuth(ctx, env.Client); err != nil {
		lv.refuse("reading its root credentials: %v", err)
	}
	if len(lv.Problems) > problems {
		// Without usable certificates etcd cannot be asked.
		return lv
	}
	if err := lv.askEtcd(ctx, env); err != nil {
		lv.refuse("asking etcd for its members: %v", err)
		return lv
	}
	lv.matchPods()
	if err := lv.readClaims(ctx, env.Client); err != nil {
		lv.refuse("reading the claims: %v", err)
	}
	lv.checkOwners()
	return lv
}

func (lv *Live) readObjects(ctx context.Context, c client.Client) error {
	l := lv.Legacy
	sts := &appsv1.StatefulSet{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: l.Namespace(), Name: l.Name()}, sts); {
	case err == nil:
		lv.StatefulSet = sts
	case !apierrors.IsNotFound(err):
		return err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(l.Namespace()), client.MatchingLabels(l.SelectorLabels())); err != nil {
		return err
	}
	for i := range pods.Items {
		lv.Pods = append(lv.Pods, &pods.Items[i])
	}
	slices.SortFunc(lv.Pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	adopted := &v1alpha2.EtcdCluster{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: l.Namespace(), Name: l.Name()}, adopted); {
	case err == nil:
		lv.Adopted = adopted
		if adopted.Annotations[MigratedFromAnnotation] != string(l.Object.GetUID()) {
			lv.refuse("an EtcdCluster %s already exists that etcd-migrate did not make from this legacy cluster", l.Name())
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// askEtcd reads the membership and auth state through the first Ready Pod.
func (lv *Live) askEtcd(ctx context.Context, env Env) error {
	lastErr := fmt.Errorf("no Ready Pod with labels %v", lv.Legacy.SelectorLabels())
	for _, p := range lv.Pods {
		if !podReady(p) {
			continue
		}
		err := lv.withEtcd(ctx, env, p, func(cl etcd.Maintenance) error {
			list, err := timed(ctx, 10*time.Second, cl.MemberList)
			if err != nil {
				return err
			}
			lv.ClusterID = list.ClusterID
			for _, m := range list.Members {
				lm := LiveMember{Name: m.Name, ID: m.ID, Learner: m.IsLearner}
				if len(m.PeerURLs) > 0 {
					lm.PeerURL = m.PeerURLs[0]
				}
				lv.Members = append(lv.Members, lm)
			}
			slices.SortFunc(lv.Members, func(a, b LiveMember) int { return strings.Compare(a.Name, b.Name) })
			lv.AuthEnabled, err = timed(ctx, 10*time.Second, cl.AuthEnabled)
			return err
		})
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("through pod %s: %w", p.Name, err)
	}
	return lastErr
}

// withEtcd forwards a local port to the Pod's client port and runs fn with a
// client dialled through it, over TLS with the legacy certificates when the
// cluster has client TLS (the member's own name is the one verified).
func (lv *Live) withEtcd(ctx context.Context, env Env, p *corev1.Pod, fn func(etcd.Maintenance) error) error {
	return lv.withEtcdAs(ctx, env, p, "", "", fn)
}

// withEtcdAs is withEtcd logged in as a user (none when user is empty).
func (lv *Live) withEtcdAs(ctx context.Context, env Env, p *corev1.Pod, user, password string, fn func(etcd.Maintenance) error) error {
	local, stop, err := env.Forwarder.Forward(ctx, p, manifest.ClientPort)
	if err != nil {
		return err
	}
	defer stop()
	dial := env.Dial
	if dial == nil {
		dial = etcd.DialMaintenance
	}
	cfg := lv.clientTLS()
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	cl, err := dial(ctx, etcd.Config{
		Endpoints:   []string{fmt.Sprintf("%s://%s:%d", scheme, lv.memberHost(p.Name), local)},
		TLS:         cfg,
		Username:    user,
		Password:    password,
		DialTimeout: 5 * time.Second,
		Resolve:     func(string) (string, bool) { return "127.0.0.1", true },
	})
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	return fn(cl)
}

func timed[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return call(ctx)
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// matchPods pairs every etcd member with its Pod, and refuses learners,
// members without a running Pod and Pods etcd does not know.
func (lv *Live) matchPods() {
	l := lv.Legacy
	byName := map[string]*corev1.Pod{}
	for _, p := range lv.Pods {
		byName[p.Name] = p
	}
	known := map[string]bool{}
	for i := range lv.Members {
		m := &lv.Members[i]
		known[m.Name] = true
		switch {
		case m.Learner:
			lv.refuse("member %s (%s) is a learner: let it be promoted or removed first", m.Name, etcd.FormatID(m.ID))
		case m.Name == "":
			lv.refuse("member %s was added but never started", etcd.FormatID(m.ID))
		}
		m.Pod = byName[m.Name]
		if m.Pod == nil {
			lv.refuse("member %s has no Pod of that name", m.Name)
			continue
		}
		if !podReady(m.Pod) {
			lv.refuse("pod %s is not Running and Ready (phase %s)", m.Pod.Name, m.Pod.Status.Phase)
		}
		if want := expectedPeerURL(m.PeerURL, m.Name, l.HeadlessService(), l.Namespace()); m.PeerURL != want {
			lv.refuse("member %s advertises peer URL %s, not %s: the operator could not recognise it", m.Name, m.PeerURL, want)
		}
	}
	for _, p := range lv.Pods {
		if !known[p.Name] {
			lv.refuse("pod %s carries the cluster's labels but etcd has no member of that name", p.Name)
		}
	}
}

// expectedPeerURL is the URL the operator renders for an adopted member, in
// the scheme the member uses now.
func expectedPeerURL(have, member, service, ns string) string {
	scheme := "https"
	if u, err := url.Parse(have); err == nil && u.Scheme == "http" {
		scheme = "http"
	}
	return fmt.Sprintf("%s://%s.%s.%s.svc:%d", scheme, member, service, ns, manifest.PeerPort)
}

func (lv *Live) readClaims(ctx context.Context, c client.Client) error {
	for i := range lv.Members {
		m := &lv.Members[i]
		pvc := &corev1.PersistentVolumeClaim{}
		name := manifest.PVCName(m.Name)
		err := c.Get(ctx, client.ObjectKey{Namespace: lv.Legacy.Namespace(), Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			lv.refuse("member %s has no claim %s", m.Name, name)
		case err != nil:
			return err
		default:
			m.PVC = pvc
		}
	}
	return nil
}

// checkOwners refuses Pods and claims that belong to anything but the
// StatefulSet or (after an earlier run) the member adopting them.
func (lv *Live) checkOwners() {
	for _, m := range lv.Members {
		if m.Pod != nil {
			lv.checkOwner(m.Pod, m.Name)
		}
		if m.PVC != nil {
			lv.checkOwner(m.PVC, m.Name)
		}
	}
}

func (lv *Live) checkOwner(obj metav1.Object, member string) {
	if ref := metav1.GetControllerOf(obj); ref != nil && !lv.knownOwner(*ref, member) {
		lv.refuse("%s is controlled by %s %s, which etcd-migrate does not know", obj.GetName(), ref.Kind, ref.Name)
	}
}

func (lv *Live) knownOwner(ref metav1.OwnerReference, member string) bool {
	switch {
	case ref.Kind == "StatefulSet" && ref.Name == lv.Legacy.Name():
		return true
	case ref.Kind == "EtcdMember" && ref.Name == member && ref.APIVersion == v1alpha2.GroupVersion.String():
		return true
	}
	return false
}

// facts sums up what the translation needs.
func (lv *Live) facts() LiveFacts {
	f := LiveFacts{Members: int32(len(lv.Members))}
	for _, m := range lv.Members {
		if strings.HasPrefix(m.PeerURL, "https://") {
			f.PeerTLS = true
		}
		if m.Pod != nil && f.Image == "" {
			f.Image, f.Args = etcdCommand(m.Pod)
		}
		if m.PVC != nil {
			claimFacts(&f, m.PVC)
		}
	}
	return f
}

// etcdCommand is the image and command line of a Pod's etcd container.
func etcdCommand(p *corev1.Pod) (string, []string) {
	for _, c := range p.Spec.Containers {
		if c.Name == "etcd" {
			return c.Image, append(slices.Clone(c.Command), c.Args...)
		}
	}
	return "", nil
}

// claimFacts folds a member's claim into the facts: the largest request
// and the first class seen.
func claimFacts(f *LiveFacts, pvc *corev1.PersistentVolumeClaim) {
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok && (f.ClaimSize == nil || q.Cmp(*f.ClaimSize) > 0) {
		f.ClaimSize = ptrTo(q)
	}
	if f.StorageClassName == nil {
		f.StorageClassName = pvc.Spec.StorageClassName
	}
}

func ptrTo(q resource.Quantity) *resource.Quantity { return &q }
