package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

func init() { suiteNamespaces = append(suiteNamespaces, "e2e-tls-handover") }

// The CA cert-manager signs the new material with (docs/security.md's).
const handoverIssuers = `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: etcd-ca}
spec:
  isCA: true
  commonName: etcd-ca
  secretName: etcd-ca
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Never}
  issuerRef: {name: selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: etcd-ca}
spec:
  ca: {secretName: etcd-ca}
`

// TestTLSHandover moves a running cluster with mutual TLS on both planes
// from the user's own Secrets (one CA) to cert-manager (another CA), as
// docs/security.md says, under a writer that trusts both CAs and offers a
// client certificate of each. Every member is restarted three times, one
// at a time, and keeps its etcd identity; the writer loses no
// acknowledged write. A client that kept only the old CA and its old
// certificate is served before and refused after: what clients must do
// first.
func TestTLSHandover(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-tls-handover")
	installCertManager(t)
	const name = "handover"
	if out, err := kubectlStdin(handoverIssuers, "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the Issuers: %v\n%s", err, out)
	}
	newCA := secretData(t, ns, "etcd-ca", "tls.crt")

	old, oldCert := ownMaterial(t, ns, name)
	// The writer trusts both CAs from the start and offers the client
	// certificate each member asks for: what docs/security.md tells
	// clients to do before a hand-over.
	var newCert atomic.Pointer[tls.Certificate]
	both := x509.NewCertPool()
	both.AppendCertsFromPEM(old.certPEM)
	both.AppendCertsFromPEM(newCA)
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: both, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			for _, c := range []*tls.Certificate{newCert.Load(), oldCert} {
				if c != nil && cri.SupportsCertificate(c) == nil {
					return c, nil
				}
			}
			return oldCert, nil
		}})
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) { c.Spec.TLS = ownTLS(name) })
	w := startWriter(t, ns, name)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w.requireWritesAfter("", 20, time.Minute)

	// A client that knows only the old CA and its old certificate.
	stale := x509.NewCertPool()
	stale.AppendCertsFromPEM(old.certPEM)
	staleTLS := &tls.Config{RootCAs: stale, Certificates: []tls.Certificate{*oldCert}, MinVersion: tls.VersionTLS12}
	eps, err := podEndpoints(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := readOnce(ns, name, eps, staleTLS); err != nil {
		t.Fatalf("a client of the old CA was refused before the hand-over: %v", err)
	}
	before := memberIDs(t, ns, name)

	w.mark("hand over")
	patch := `{"spec":{"tls":{"client":{"serverSecretRef":null,"operatorClientSecretRef":null,` +
		`"certManager":{"serverIssuerRef":{"name":"etcd-ca"},"operatorClientIssuerRef":{"name":"etcd-ca"}}},` +
		`"peer":{"secretRef":null,"certManager":{"issuerRef":{"name":"etcd-ca"}}}}}}`
	if out, err := kubectl("-n", ns, "patch", "etcdcluster", name, "--type=merge", "-p", patch); err != nil {
		t.Fatalf("handing the cluster's TLS over to cert-manager: %v\n%s", err, out)
	}
	newCert.Store(issuedPair(t, ns, name+"-operator-client-tls"))
	eventually(t, 10*time.Minute, "the TLS hand-over completes", func() (bool, string) {
		c := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.TLSHandover)
		if c == nil {
			return false, "no TLSHandover condition"
		}
		return c.Reason == conditions.ReasonHandoverComplete, c.Reason + ": " + c.Message
	})
	w.mark("handed over")
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.requireWritesAfter("handed over", 10, time.Minute)
	t.Logf("hand-over: longest write stall %s", w.longestStall("hand over", "handed over").Round(time.Millisecond))

	checkHandedOver(t, ns, name, before, &newCert)

	// Clients: the stale one is refused now; one with both CAs but only
	// the old certificate too; the new certificate is served.
	if eps, err = podEndpoints(ns, name); err != nil {
		t.Fatal(err)
	}
	if err := readOnce(ns, name, eps, staleTLS); err == nil {
		t.Error("a client that trusts only the old CA was served after the hand-over")
	}
	if err := readWith(ns, name, oldCert); err == nil {
		t.Error("a client certificate of the old CA was accepted after the hand-over")
	}
	if err := readWith(ns, name, newCert.Load()); err != nil {
		t.Errorf("a client certificate of the new CA was refused: %v", err)
	}
	w.verify("handed over")

	// The old source cannot come back: that would be a second hand-over.
	back := `{"spec":{"tls":{"peer":{"certManager":null,"secretRef":{"name":"` + name + `-peer"}}}}}`
	if out, err := kubectl("-n", ns, "patch", "etcdcluster", name, "--type=merge", "-p", back); err == nil {
		t.Errorf("moving the peer plane back to own Secrets was accepted:\n%s", out)
	}
	if cond := meta.FindStatusCondition(getCluster(t, ns, name).Status.Conditions, conditions.TLSHandover); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("TLSHandover %+v, want False/Complete", cond)
	}
}

// checkHandedOver: the hand-over was one roll-out of the three members,
// which kept their etcd identities, mount nothing of the old material,
// serve the new certificates; the trust Secret is gone.
func checkHandedOver(t *testing.T, ns, name string, before map[string]string, newCert *atomic.Pointer[tls.Certificate]) {
	t.Helper()
	// The roll-out's end is recorded once the last member settled, a few
	// seconds after the target is reached.
	eventually(t, time.Minute, "the hand-over's roll-out is recorded complete", func() (bool, string) {
		lr := getCluster(t, ns, name).Status.LastRollOut
		return lr != nil && lr.CompletionTime != nil, fmt.Sprintf("last roll-out %+v", lr)
	})
	if lr := getCluster(t, ns, name).Status.LastRollOut; lr.Cause != v1alpha2.RollOutCauseTLSHandover || len(lr.Restarted) != 3 {
		t.Errorf("last roll-out %+v, want a TLSHandover roll-out of the 3 members", lr)
	}
	if after := memberIDs(t, ns, name); !maps.Equal(after, before) {
		t.Errorf("members and their etcd IDs changed: %v, were %v", after, before)
	}
	for n, p := range pods(t, ns, name) {
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && (v.Secret.SecretName == name+"-server" || v.Secret.SecretName == name+"-peer" || v.Name == "tls-trust") {
				t.Errorf("member %s still mounts %s", n, v.Secret.SecretName)
			}
		}
	}
	r := &rotation{t: t, ns: ns, name: name, clientCert: newCert}
	r.servingSerial("2379", secretLeaf(t, ns, name+"-server-tls").SerialNumber)
	r.servingSerial("2380", secretLeaf(t, ns, name+"-peer-tls").SerialNumber)
	err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.HandoverSecretName(name)}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the hand-over's trust Secret is still there (%v)", err)
	}
}

// ownMaterial makes the user's own CA and the cluster's Secrets from it
// (<name>-server, -peer, -operator), and returns the CA and the client
// certificate.
func ownMaterial(t *testing.T, ns, name string) (*testCA, *tls.Certificate) {
	t.Helper()
	old := newNamedCA(t, "own etcd CA")
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	createTLSSecret(t, ns, name+"-server", old.issue(t, "server", domains, usage), old.certPEM)
	createTLSSecret(t, ns, name+"-peer", old.issue(t, "peer", domains[:2], usage), old.certPEM)
	operator := old.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, ns, name+"-operator", operator, old.certPEM)
	return old, x509Pair(t, operator)
}
