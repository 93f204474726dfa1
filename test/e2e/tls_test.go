package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// TestOwnTLSSecrets runs a cluster with mutual TLS on both planes from Secrets
// the user brings: members verify each other, the operator presents its own
// client certificate, and a client without one is refused.
func TestOwnTLSSecrets(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-tls")
	const name = "secure"
	ca := newCA(t)
	// etcd checks a peer's client certificate against the reverse lookup of
	// its address, which cluster DNS answers with the cluster.local name.
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	server := ca.issue(t, "server", domains, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	peer := ca.issue(t, "peer", domains[:2], []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	operator := ca.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	for secret, kp := range map[string]keyPair{"server-tls": server, "peer-tls": peer, "operator-tls": operator} {
		createTLSSecret(t, ns, secret, kp, ca.certPEM)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	clientCert, err := tls.X509KeyPair(operator.certPEM, operator.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12})

	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
			Client: &v1alpha2.ClientTLS{
				ServerSecretRef:         &corev1.LocalObjectReference{Name: "server-tls"},
				OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "operator-tls"},
			},
			Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "peer-tls"}},
		}
	})
	w := startWriter(t, ns, name)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	setReplicas(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 3*time.Minute)
	w.mark("scaled down")
	w.verify("scaled down")

	if err := readWith(ns, name, nil); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := readWith(ns, name, &clientCert); err != nil {
		t.Errorf("a client with a certificate was refused: %v", err)
	}
}

// ownTLS is the TLS of a cluster from Secrets named after it:
// <name>-server for the client plane, <name>-operator for the operator's
// client certificate, <name>-peer for the peer plane.
func ownTLS(name string) *v1alpha2.EtcdClusterTLS {
	return &v1alpha2.EtcdClusterTLS{
		Client: &v1alpha2.ClientTLS{
			ServerSecretRef:         &corev1.LocalObjectReference{Name: name + "-server"},
			OperatorClientSecretRef: &corev1.LocalObjectReference{Name: name + "-operator"},
		},
		Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: name + "-peer"}},
	}
}

type keyPair struct{ certPEM, keyPEM []byte }

type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	return newNamedCA(t, "e2e etcd CA")
}

func newNamedCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial int64 = 1

func (ca *testCA) issue(t *testing.T, cn string, dns []string, usage []x509.ExtKeyUsage) keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usage,
	}
	if dns != nil {
		// A certificate without names is a client's: etcd checks the
		// names of a peer's certificate against its address only when
		// it has some.
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

func createTLSSecret(t *testing.T, ns, name string, kp keyPair, caPEM []byte) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": kp.certPEM, "tls.key": kp.keyPEM},
	}
	if caPEM != nil {
		s.Data["ca.crt"] = caPEM
	}
	if err := k.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
