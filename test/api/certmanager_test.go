package api

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	clustercontroller "github.com/seed74754924/etcd-operator/internal/controller/cluster"
	membercontroller "github.com/seed74754924/etcd-operator/internal/controller/member"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The operator's cert-manager mode (issue 10) against a real API server:
// without cert-manager a cluster asking for it reports so and gets nothing,
// other clusters go on; installing cert-manager's real CRDs later makes the
// running operator (no restart) create the Certificates, which the real
// schema accepts; and once the Secrets exist the members get their Pods.
// cert-manager's controllers do not run here: the test writes the Secrets
// they would write, from a CA of its own.

const testDomain = "corp.example"

func TestCertManagerInstalledAfterTheOperator(t *testing.T) {
	crdDir, err := tools.CertManagerCRDs()
	if err != nil {
		t.Fatal(err)
	}
	withoutCertManager(t)
	ns := namespace(t)
	op := startOperator(t, ns)
	ctx := context.Background()

	secure := tlsCluster(ns, "secure")
	plain := tlsCluster(ns, "plain")
	plain.Spec.TLS = nil
	for _, c := range []*v1alpha2.EtcdCluster{secure, plain} {
		if err := k.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	// (a) No cert-manager: the cluster says so and gets nothing.
	op.waitFor(t, "secure reports CertManagerNotInstalled", 30*time.Second, func() error {
		return clusterReason(ns, "secure", conditions.Available, conditions.ReasonCertManagerNotInstalled,
			"spec.tls.client.certManager and spec.tls.peer.certManager")
	})
	// Another cluster is not held up: its seed gets a Pod.
	op.waitFor(t, "plain's seed has a Pod", 30*time.Second, func() error { return podsOf(ns, "plain", 1) })
	if got := childrenOf(t, ns, "secure"); len(got) > 0 {
		t.Fatalf("without cert-manager the cluster got %v", got)
	}

	// (b) cert-manager's CRDs appear; the same operator creates the
	// Certificates at its next look.
	installCRDs(t, crdDir)
	want, err := manifest.Certificates(getCluster(t, ns, "secure"), testDomain)
	if err != nil {
		t.Fatal(err)
	}
	op.waitFor(t, "the Certificates", 2*certManagerPoll, func() error { return certificatesExist(ns, want) })
	certs := checkCertificates(t, getCluster(t, ns, "secure"), want)
	if n := op.events.count("secure", conditions.ReasonCertManagerNotInstalled); n != 1 {
		t.Errorf("%d CertManagerNotInstalled Events, want one for the whole wait", n)
	}

	// Members wait for the Secrets cert-manager would write.
	op.waitFor(t, "secure waits for its Secrets", 30*time.Second, func() error {
		return clusterReason(ns, "secure", conditions.Available, conditions.ReasonSecretMissing, "secure-")
	})
	if err := podsOf(ns, "secure", 0); err != nil {
		t.Fatal(err)
	}

	// (c) The Secrets appear, as cert-manager would write them: the seed
	// starts, and the names it is reached at are in its certificates.
	ca := newTestCA(t)
	for _, cert := range certs {
		if err := k.Create(ctx, ca.issue(t, cert)); err != nil {
			t.Fatal(err)
		}
	}
	op.waitFor(t, "secure's seed has a Pod", 30*time.Second, func() error { return podsOf(ns, "secure", 1) })
	seed := membersOf(t, ns, "secure")[0]
	ca.checkServes(t, ns, manifest.ServerTLSSecretName("secure"), hostOf(t, manifest.ClientURL(&seed)), "secure-client."+ns+".svc")
	ca.checkServes(t, ns, manifest.PeerTLSSecretName("secure"), hostOf(t, manifest.PeerURL(&seed)), hostOf(t, manifest.PeerURL(&seed))+"."+testDomain)
}

// certManagerPoll is the operator's interval for looking for cert-manager.
const certManagerPoll = 30 * time.Second

func tlsCluster(ns, name string) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	c.Spec.Version = "3.6.16"
	c.Spec.Replicas = ptr.To[int32](1)
	c.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse("256Mi")}
	c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
		Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{
			ServerIssuerRef:         v1alpha2.IssuerReference{Name: "etcd-ca"},
			OperatorClientIssuerRef: &v1alpha2.IssuerReference{Name: "etcd-ca"},
		}},
		Peer: &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{
			IssuerRef: v1alpha2.IssuerReference{Name: "etcd-peer-ca", Kind: "ClusterIssuer"},
		}},
	}
	return c
}

// operator is the cluster and member controllers running in a manager of
// their own, watching one namespace.
type operator struct {
	events  *eventLog
	stopped chan error
}

func startOperator(t *testing.T, ns string) *operator {
	t.Helper()
	mgr, ctx, cancel := newManager(t, ns)
	op := &operator{events: &eventLog{}, stopped: make(chan error, 1)}
	cr := &clustercontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: op.events,
		Dial: noEtcd, ClusterDomain: testDomain}
	mr := &membercontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: op.events, Dial: noEtcd}
	if err := cr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	go func() { op.stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-op.stopped; err != nil {
			t.Errorf("the operator stopped with: %v", err)
		}
		if t.Failed() {
			t.Logf("operator logs (namespace %s):\n%s", ns, operatorLogs)
		}
	})
	return op
}

// waitFor polls check until it passes, failing the test at the deadline
// or as soon as the operator stops.
func (op *operator) waitFor(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		select {
		case stopErr := <-op.stopped:
			return false, fmt.Errorf("the operator stopped: %w", stopErr)
		default:
		}
		last = check()
		return last == nil, nil
	})
	if err != nil {
		if last == nil || !wait.Interrupted(err) {
			last = err
		}
		t.Fatalf("waiting for %s: %v (after %s)\nEvents:\n%s", what, last, timeout, op.events)
	}
}

func getCluster(t *testing.T, ns, name string) *v1alpha2.EtcdCluster {
	t.Helper()
	c := &v1alpha2.EtcdCluster{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func clusterReason(ns, name, typ, reason, inMessage string) error {
	c := &v1alpha2.EtcdCluster{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		return err
	}
	cond := conditions.Get(c.Status.Conditions, typ)
	if cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, inMessage) {
		return fmt.Errorf("%s is %+v, want reason %s mentioning %q", typ, cond, reason, inMessage)
	}
	return nil
}

func membersOf(t *testing.T, ns, cluster string) []v1alpha2.EtcdMember {
	t.Helper()
	list := &v1alpha2.EtcdMemberList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// podsOf checks that the cluster's member Pods number exactly n.
func podsOf(ns, cluster string, n int) error {
	pods := &corev1.PodList{}
	if err := k.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: cluster}); err != nil {
		return err
	}
	if len(pods.Items) != n {
		return fmt.Errorf("%s has %d Pods, want %d", cluster, len(pods.Items), n)
	}
	return nil
}

// childrenOf lists what the operator made for a cluster: members, Services.
func childrenOf(t *testing.T, ns, cluster string) []string {
	t.Helper()
	var out []string
	for _, m := range membersOf(t, ns, cluster) {
		out = append(out, "member "+m.Name)
	}
	svcs := &corev1.ServiceList{}
	if err := k.List(context.Background(), svcs, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		out = append(out, "service "+s.Name)
	}
	return out
}

// installCRDs installs cert-manager's CRDs and deletes them when the test
// ends, so that a repeated run (-count) starts without them.
func installCRDs(t *testing.T, dir string) {
	t.Helper()
	opts := envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true}
	if _, err := envtest.InstallCRDs(restConfig, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := envtest.UninstallCRDs(restConfig, opts); err != nil {
			t.Error(err)
		}
	})
}

// withoutCertManager waits until no cert-manager CRD is left from an
// earlier run in this process (the API server removes a CRD only after
// its objects, which can take a while).
func withoutCertManager(t *testing.T) {
	t.Helper()
	var left []apiextensionsv1.CustomResourceDefinition
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		crds := &apiextensionsv1.CustomResourceDefinitionList{}
		if err := k.List(ctx, crds); err != nil {
			return false, err
		}
		left = slices.DeleteFunc(crds.Items, func(c apiextensionsv1.CustomResourceDefinition) bool {
			return !strings.HasSuffix(c.Spec.Group, "cert-manager.io")
		})
		return len(left) == 0, nil
	})
	switch {
	case err == nil:
	case wait.Interrupted(err) && len(left) > 0:
		t.Fatalf("cert-manager's CRD %s is still there", left[0].Name)
	default:
		t.Fatal(err)
	}
}

func certificatesExist(ns string, want []*unstructured.Unstructured) error {
	for _, w := range want {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(manifest.CertificateGVK)
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: w.GetName()}, got); err != nil {
			return err
		}
	}
	return nil
}

// checkCertificates compares the Certificates as the API server stored them
// with what the operator renders: the real schema keeps every field (it
// prunes unknown ones silently), and names, labels and owner are the
// cluster's.
func checkCertificates(t *testing.T, c *v1alpha2.EtcdCluster, want []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	names := map[string]bool{}
	var out []*unstructured.Unstructured
	for _, w := range want {
		names[w.GetName()] = true
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(manifest.CertificateGVK)
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		out = append(out, got)
		if !equality.Semantic.DeepEqual(got.Object["spec"], w.Object["spec"]) {
			t.Errorf("Certificate %s: the API server stored spec\n%v\nthe operator rendered\n%v", w.GetName(), got.Object["spec"], w.Object["spec"])
		}
		if !maps.Equal(got.GetLabels(), manifest.ClusterLabels(c.Name)) {
			t.Errorf("Certificate %s: labels %v", w.GetName(), got.GetLabels())
		}
		if !metav1.IsControlledBy(got, c) {
			t.Errorf("Certificate %s: owners %+v, want the cluster", w.GetName(), got.GetOwnerReferences())
		}
	}
	if !names["secure-server"] || !names["secure-operator-client"] || !names["secure-peer"] || len(names) != 3 {
		t.Errorf("Certificates %v", slices.Sorted(maps.Keys(names)))
	}
	// The label the docs suggest finds them.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(manifest.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := k.List(context.Background(), list, client.InNamespace(c.Namespace), client.MatchingLabels{manifest.LabelInstance: c.Name}); err != nil || len(list.Items) != 3 {
		t.Errorf("Certificates labelled %s=%s: %d (%v)", manifest.LabelInstance, c.Name, len(list.Items), err)
	}
	return out
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}

// eventLog keeps the Events the controllers emit.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	l.events = append(l.events, fmt.Sprintf("%s %s %s: %s", name, eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *eventLog) count(object, reason string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if strings.HasPrefix(e, object+" ") && strings.Contains(e, " "+reason+": ") {
			n++
		}
	}
	return n
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, "\n")
}
