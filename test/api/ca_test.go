package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// testCA signs certificates the way a cert-manager CA Issuer would, from
// what a Certificate asks for.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	serial  int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue makes the kubernetes.io/tls Secret cert-manager would write for a
// Certificate: its names, usages and key size, and the CA in ca.crt.
func (ca *testCA) issue(t *testing.T, cert *unstructured.Unstructured) *corev1.Secret {
	t.Helper()
	spec := func(f string) string { s, _, _ := unstructured.NestedString(cert.Object, "spec", f); return s }
	list := func(f string) []string { s, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", f); return s }
	size, _, _ := unstructured.NestedInt64(cert.Object, "spec", "privateKey", "size")
	key, err := rsa.GenerateKey(rand.Reader, int(size))
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: spec("commonName")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: list("dnsNames"),
	}
	for _, ip := range list("ipAddresses") {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range list("usages") {
		switch u {
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		case "digital signature":
			tmpl.KeyUsage |= x509.KeyUsageDigitalSignature
		case "key encipherment":
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: cert.GetNamespace(), Name: spec("secretName")},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			manifest.KeyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			manifest.KeyKey:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
			manifest.KeyCA:   ca.certPEM,
		},
	}
}

// checkServes checks that the certificate in a Secret is valid, for a
// server, under each name.
func (ca *testCA) checkServes(t *testing.T, ns, secret string, names ...string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secret}, s); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(s.Data[manifest.KeyCert])
	if block == nil {
		t.Fatalf("Secret %s holds no certificate", secret)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, name := range names {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the certificate of Secret %s does not serve %s: %v (names %v)", secret, name, err, cert.DNSNames)
		}
	}
}
