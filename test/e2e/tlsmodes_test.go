package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestTLSModes runs, side by side and each with a writer, a cluster in each
// TLS mode that the other suites do not: TLS on the client plane only (a
// server certificate, clients not asked for one), mutual TLS on the client
// plane only, TLS on the peer plane only, and cert-manager with a
// self-signed Issuer for the members directly. The self-signed Issuer is
// created only after its cluster, so that cluster first waits, naming the
// Secret cert-manager has not written yet, and proceeds once it has. Every
// cluster starts from its seed alone, grows 1 → 2 and shrinks back to 1 (a
// learner joins and a member leaves in each mode: the peer and client
// certificates of a new member are what a mode can get wrong; more members
// would repeat the same join at the cost of the tier's time); then each
// refuses the client its mode refuses.
func TestTLSModes(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-tlsmodes")
	installCertManager(t)
	ca := newCA(t)
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	domains := func(name string) []string {
		return []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)

	// TLS on the client plane only.
	createTLSSecret(t, ns, "server-only-tls", ca.issue(t, "server-only", domains("server-only"), usage), ca.certPEM)
	clientTLS.Store(ns+"/server-only", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	newCluster(t, ns, "server-only", 1, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{ServerSecretRef: &corev1.LocalObjectReference{Name: "server-only-tls"}}}
	})

	// Mutual TLS on the client plane only.
	operator := ca.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, ns, "mutual-tls", ca.issue(t, "mutual", domains("mutual"), usage), ca.certPEM)
	createTLSSecret(t, ns, "mutual-operator-tls", operator, ca.certPEM)
	operatorCert := x509Pair(t, operator)
	clientTLS.Store(ns+"/mutual", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*operatorCert}, MinVersion: tls.VersionTLS12})
	newCluster(t, ns, "mutual", 1, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{
			ServerSecretRef:         &corev1.LocalObjectReference{Name: "mutual-tls"},
			OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "mutual-operator-tls"},
		}}
	})

	// TLS on the peer plane only; clients speak plain gRPC.
	peer := ca.issue(t, "peer-only", domains("peer-only")[:2], usage)
	createTLSSecret(t, ns, "peer-only-tls", peer, ca.certPEM)
	newCluster(t, ns, "peer-only", 1, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "peer-only-tls"}}}
	})

	// cert-manager with a self-signed Issuer that does not exist yet.
	const selfSigned = "self-signed"
	newCluster(t, ns, selfSigned, 1, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
			Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{ServerIssuerRef: v1alpha2.IssuerReference{Name: "self"}}},
			Peer:   &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: v1alpha2.IssuerReference{Name: "self"}}},
		}
	})
	eventually(t, 3*time.Minute, "the cluster names the Secret cert-manager has not written", func() (bool, string) {
		c := getCluster(t, ns, selfSigned)
		a := conditions.Get(c.Status.Conditions, conditions.Available)
		return a != nil && a.Reason == conditions.ReasonSecretMissing && strings.Contains(a.Message, selfSigned+"-"), condString(a)
	})
	if n := len(pods(t, ns, selfSigned)); n != 0 {
		t.Fatalf("%d Pods were created before their certificates existed", n)
	}
	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
		"metadata": map[string]any{"name": "self", "namespace": ns},
		"spec":     map[string]any{"selfSigned": map[string]any{}},
	}}
	if err := k.Create(context.Background(), issuer); err != nil {
		t.Fatal(err)
	}
	// A self-signed certificate is its own CA: clients trust the server
	// certificate itself.
	server := &corev1.Secret{}
	eventually(t, 3*time.Minute, "cert-manager writes "+selfSigned+"-server-tls", func() (bool, string) {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: selfSigned + "-server-tls"}, server); err != nil {
			return false, err.Error()
		}
		return len(server.Data["ca.crt"]) > 0, "no ca.crt yet"
	})
	selfPool := x509.NewCertPool()
	selfPool.AppendCertsFromPEM(server.Data["ca.crt"])
	clientTLS.Store(ns+"/"+selfSigned, &tls.Config{RootCAs: selfPool, MinVersion: tls.VersionTLS12})

	names := []string{"server-only", "mutual", "peer-only", selfSigned}
	scaleTogether(t, ns, names)
	refusedByMode(t, ns, ca, operatorCert)
	for _, name := range names {
		for _, m := range members(t, ns, name) {
			if !metav1.IsControlledBy(&m, getCluster(t, ns, name)) {
				t.Errorf("member %s is not the cluster's", m.Name)
			}
		}
	}
	certs := &unstructured.UnstructuredList{}
	certs.SetGroupVersionKind(manifest.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := k.List(context.Background(), certs, client.InNamespace(ns), client.MatchingLabels{manifest.LabelInstance: selfSigned}); err != nil || len(certs.Items) != 2 {
		t.Errorf("Certificates labelled for %s: %d (err %v), want 2 (server, peer)", selfSigned, len(certs.Items), err)
	}
}

// scaleTogether runs a writer on each cluster and scales them together
// 1 → 2 → 1, requiring writes at each size and every write kept.
func scaleTogether(t *testing.T, ns string, names []string) {
	t.Helper()
	writers := map[string]*writer{}
	for _, name := range names {
		writers[name] = startWriter(t, ns, name)
	}
	for _, n := range []int32{1, 2, 1} {
		for _, name := range names {
			setReplicas(t, ns, name, n)
		}
		for _, name := range names {
			waitReconciled(t, ns, name, int(n), 6*time.Minute)
		}
		for _, name := range names {
			writers[name].mark(fmt.Sprintf("at %d", n))
			writers[name].requireWritesAfter(fmt.Sprintf("at %d", n), 1, time.Minute)
		}
	}
	for _, name := range names {
		writers[name].verify("at 1")
	}
}

// refusedByMode checks what each cluster of TestTLSModes refuses, and
// that it serves what it should.
func refusedByMode(t *testing.T, ns string, ca *testCA, operatorCert *tls.Certificate) {
	t.Helper()
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	const selfSigned = "self-signed"
	for _, name := range []string{"server-only", "mutual", selfSigned} {
		if err := readPlain(ns, name); err == nil {
			t.Errorf("%s: a plain-text client was served", name)
		}
		if err := readWith(ns, name, nil); name == "mutual" && err == nil {
			t.Errorf("%s: a client without a certificate was served", name)
		} else if name != "mutual" && err != nil {
			t.Errorf("%s: a client that trusts the server certificate was refused: %v", name, err)
		}
	}
	if err := readWith(ns, "mutual", operatorCert); err != nil {
		t.Errorf("mutual: a client with a certificate was refused: %v", err)
	}
	if err := readWith(ns, "mutual", x509Pair(t, newNamedCA(t, "stranger").issue(t, "stranger", nil, usage))); err == nil {
		t.Error("mutual: a client with a certificate of an unknown CA was served")
	}
	// The test dials from outside cluster DNS: its certificate names
	// nothing, so etcd does not look for its address among the names.
	probe := x509Pair(t, ca.issue(t, "peer probe", nil, usage))
	for n, p := range pods(t, ns, "peer-only") {
		if err := peerVersion(p.Status.PodIP, nil); err == nil {
			t.Errorf("peer-only: member %s served its peer port to a client without a certificate", n)
		}
		if err := peerVersion(p.Status.PodIP, probe); err != nil {
			t.Errorf("peer-only: member %s refused a certificate of the peer CA on its peer port: %v", n, err)
		}
	}
	if err := readPlain(ns, "peer-only"); err != nil {
		t.Errorf("peer-only: a plain-text client was refused: %v", err)
	}
}

// readPlain reads from the cluster's members without TLS: nil when etcd
// served the read.
func readPlain(ns, cluster string) error {
	pods, err := clusterPods(ns, cluster)
	if err != nil {
		return err
	}
	var eps []string
	for _, p := range pods {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			eps = append(eps, fmt.Sprintf("http://%s.%s.%s.svc:2379", p.Name, cluster, ns))
		}
	}
	return readOnce(ns, cluster, eps, nil)
}

// peerVersion asks a member's peer port for its version over TLS,
// presenting cert (or no certificate): nil when the member answered.
func peerVersion(ip string, cert *tls.Certificate) error {
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} // who answers is not the question
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := hc.Get("https://" + net.JoinHostPort(ip, "2380") + "/version")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
