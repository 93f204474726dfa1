package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCAChain builds the chain the operator's TLS needs: a self-signed
// ClusterIssuer signs a CA Certificate, an Issuer signs with that CA, and a
// leaf Certificate with DNS names comes from the Issuer.
func TestCAChain(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)

	if _, err := cm.CertmanagerV1().ClusterIssuers().Create(ctx, selfSignedClusterIssuer("selfsigned-"+ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClusterIssuerReady(t, "selfsigned-"+ns)

	ca := certificate(ns, "root-ca", issuedBy("ClusterIssuer", "selfsigned-"+ns), isCA("etcd test CA"))
	if _, err := cm.CertmanagerV1().Certificates(ns).Create(ctx, ca, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCertificateReady(t, ns, ca.Name)

	if _, err := cm.CertmanagerV1().Issuers(ns).Create(ctx, caIssuer(ns, "ca", ca.Spec.SecretName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIssuerReady(t, ns, "ca")

	names := []string{"etcd-0.etcd." + ns + ".svc", "etcd-client." + ns + ".svc"}
	leaf := certificate(ns, "server", issuedBy("Issuer", "ca"), dnsNames(names...))
	if _, err := cm.CertmanagerV1().Certificates(ns).Create(ctx, leaf, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCertificateReady(t, ns, leaf.Name)

	caChain, caOfCA, _ := secretCertificates(t, ns, ca.Spec.SecretName)
	root := caChain[0]
	if !root.IsCA || !root.Equal(caOfCA) {
		t.Fatalf("CA Secret: want a self-signed CA in tls.crt and ca.crt, got IsCA=%v same=%v", root.IsCA, root.Equal(caOfCA))
	}
	chain, leafCA, secret := secretCertificates(t, ns, leaf.Spec.SecretName)
	if !leafCA.Equal(root) {
		t.Fatalf("leaf Secret's ca.crt is not the CA Certificate's certificate")
	}
	roots := x509.NewCertPool()
	roots.AddCert(leafCA)
	for _, name := range names {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("leaf does not verify for %s: %v", name, err)
		}
	}
	if !slices.Equal(chain[0].DNSNames, names) {
		t.Errorf("leaf SANs: got %v, want %v", chain[0].DNSNames, names)
	}
	if _, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"]); err != nil {
		t.Errorf("leaf tls.key does not match tls.crt: %v", err)
	}
}
