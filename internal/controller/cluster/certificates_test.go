package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// These tests run the cluster controller's passes on a fake API server that
// serves cert-manager's Certificate kind or not; test/api does the same
// against a real API server and cert-manager's real CRDs.

type fakeEvents struct{ events []string }

func (f *fakeEvents) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _ string, note string, args ...any) {
	f.events = append(f.events, reason+": "+fmt.Sprintf(note, args...))
}

func (f *fakeEvents) count(reason string) int {
	n := 0
	for _, e := range f.events {
		if strings.HasPrefix(e, reason+": ") {
			n++
		}
	}
	return n
}

// testScheme knows the built-in kinds and the operator's.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// certTestReconciler builds a reconciler on a fake API server holding objs;
// withCertManager makes it serve cert-manager.io/v1 Certificates.
func certTestReconciler(t *testing.T, withCertManager bool, objs ...client.Object) (*Reconciler, client.Client, *fakeEvents) {
	t.Helper()
	scheme := testScheme(t)
	mapper := testrestmapper.TestOnlyStaticRESTMapper(scheme)
	if withCertManager {
		certs := meta.NewDefaultRESTMapper(nil)
		certs.Add(manifest.CertificateGVK, meta.RESTScopeNamespace)
		mapper = meta.MultiRESTMapper{mapper, certs}
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).
		WithStatusSubresource(&v1alpha2.EtcdCluster{}).WithObjects(objs...)
	for _, f := range index.Fields() {
		b = b.WithIndex(f.Object, f.Name, f.Extract)
	}
	c := b.Build()
	ev := &fakeEvents{}
	r := &Reconciler{Client: c, APIReader: c, Recorder: ev, Clock: clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		ClusterDomain: "corp.example"}
	return r, c, ev
}

// certManagerCluster is paused (replicas 0), so that passes make no members
// and only the Certificates matter.
func certManagerCluster() *v1alpha2.EtcdCluster {
	return &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db-uid", Generation: 1},
		Spec: v1alpha2.EtcdClusterSpec{Version: "3.6.16", Replicas: ptr.To[int32](0), TLS: &v1alpha2.EtcdClusterTLS{
			Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{ServerIssuerRef: v1alpha2.IssuerReference{Name: "ca"}}},
			Peer:   &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: v1alpha2.IssuerReference{Name: "ca"}}},
		}},
	}
}

func reconcileN(t *testing.T, r *Reconciler, n int) ctrl.Result {
	t.Helper()
	var res ctrl.Result
	for range n {
		var err error
		res, err = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "db"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func certificate(t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(manifest.CertificateGVK)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, u); err != nil {
		return nil
	}
	return u
}

func TestWithoutCertManagerNothingIsCreated(t *testing.T) {
	r, c, ev := certTestReconciler(t, false, certManagerCluster())
	res := reconcileN(t, r, 3)
	if res.RequeueAfter != certManagerPoll {
		t.Errorf("requeue after %s, want %s to look for cert-manager again", res.RequeueAfter, certManagerPoll)
	}
	cl := &v1alpha2.EtcdCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "db"}, cl); err != nil {
		t.Fatal(err)
	}
	for typ, status := range map[string]metav1.ConditionStatus{conditions.Available: metav1.ConditionFalse, conditions.Progressing: metav1.ConditionFalse, conditions.Degraded: metav1.ConditionFalse} {
		if cond := conditions.Get(cl.Status.Conditions, typ); cond == nil || cond.Status != status || cond.Reason != conditions.ReasonCertManagerNotInstalled {
			t.Errorf("%s: %+v", typ, cond)
		}
	}
	if cl.Status.Observed != nil || cl.Status.ClusterToken != "" {
		t.Errorf("a target was latched while nothing can act on it: %+v", cl.Status)
	}
	if n := ev.count(conditions.ReasonCertManagerNotInstalled); n != 1 {
		t.Errorf("%d CertManagerNotInstalled Events over 3 passes, want 1: %q", n, ev.events)
	}
	if got := childrenOf(t, c); len(got) > 0 {
		t.Errorf("created %v without cert-manager", got)
	}
}

func TestCertificatesAreCreatedOnceAndNeverChanged(t *testing.T) {
	r, c, _ := certTestReconciler(t, true, certManagerCluster())
	reconcileN(t, r, 1)
	for _, name := range []string{"db-server", "db-peer"} {
		if certificate(t, c, name) == nil {
			t.Fatalf("Certificate %s was not created", name)
		}
	}
	if certificate(t, c, "db-operator-client") != nil {
		t.Error("an operator client Certificate without operatorClientIssuerRef")
	}
	// Someone (cert-manager, a user) changes one; the operator leaves it.
	server := certificate(t, c, "db-server")
	if err := unstructured.SetNestedField(server.Object, "edited", "spec", "commonName"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(context.Background(), server); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, 3)
	if cn, _, _ := unstructured.NestedString(certificate(t, c, "db-server").Object, "spec", "commonName"); cn != "edited" {
		t.Errorf("the operator changed an existing Certificate: commonName %q", cn)
	}
	// A deleted one comes back.
	if err := c.Delete(context.Background(), certificate(t, c, "db-peer")); err != nil {
		t.Fatal(err)
	}
	reconcileN(t, r, 1)
	if certificate(t, c, "db-peer") == nil {
		t.Error("a deleted Certificate was not created again")
	}
}

func TestForeignCertificateIsReportedNotAdopted(t *testing.T) {
	foreign := &unstructured.Unstructured{}
	foreign.SetGroupVersionKind(manifest.CertificateGVK)
	foreign.SetNamespace("ns")
	foreign.SetName("db-server")
	foreign.SetLabels(map[string]string{"owner": "someone"})
	_ = unstructured.SetNestedField(foreign.Object, "theirs", "spec", "secretName")
	r, c, ev := certTestReconciler(t, true, certManagerCluster(), foreign)
	reconcileN(t, r, 3)
	got := certificate(t, c, "db-server")
	if len(got.GetOwnerReferences()) != 0 || got.GetLabels()["owner"] != "someone" || len(got.GetLabels()) != 1 {
		t.Errorf("the foreign Certificate was changed: owners %v labels %v", got.GetOwnerReferences(), got.GetLabels())
	}
	if certificate(t, c, "db-peer") == nil {
		t.Error("the cluster's other Certificate was not created")
	}
	cl := &v1alpha2.EtcdCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "db"}, cl); err != nil {
		t.Fatal(err)
	}
	if cond := conditions.Get(cl.Status.Conditions, conditions.Degraded); cond == nil || cond.Reason != conditions.ReasonCertificateNotOwned || !strings.Contains(cond.Message, "db-server") {
		t.Errorf("Degraded: %+v", cond)
	}
	if n := ev.count(conditions.ReasonCertificateNotOwned); n != 1 {
		t.Errorf("%d CertificateNotOwned Events over 3 passes, want 1: %q", n, ev.events)
	}
}

// childrenOf lists the members and Services of the cluster.
func childrenOf(t *testing.T, c client.Client) []string {
	t.Helper()
	var out []string
	members := &v1alpha2.EtcdMemberList{}
	svcs := &unstructured.UnstructuredList{}
	svcs.SetAPIVersion("v1")
	svcs.SetKind("ServiceList")
	for _, l := range []client.ObjectList{members, svcs} {
		if err := c.List(context.Background(), l, client.InNamespace("ns")); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members.Items {
		out = append(out, "member "+m.Name)
	}
	for _, s := range svcs.Items {
		out = append(out, "service "+s.GetName())
	}
	return out
}
