package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
)

// Builders of test objects: a base object changed by modifier functions.

func certificate(namespace, name string, mods ...func(*cmapi.Certificate)) *cmapi.Certificate {
	c := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: cmapi.CertificateSpec{
			SecretName: name + "-tls",
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
		},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

func issuedBy(kind, name string) func(*cmapi.Certificate) {
	return func(c *cmapi.Certificate) {
		c.Spec.IssuerRef = cmmeta.IssuerReference{Group: "cert-manager.io", Kind: kind, Name: name}
	}
}

func isCA(commonName string) func(*cmapi.Certificate) {
	return func(c *cmapi.Certificate) {
		c.Spec.IsCA = true
		c.Spec.CommonName = commonName
	}
}

func dnsNames(names ...string) func(*cmapi.Certificate) {
	return func(c *cmapi.Certificate) { c.Spec.DNSNames = names }
}

func lifetime(duration, renewBefore time.Duration) func(*cmapi.Certificate) {
	return func(c *cmapi.Certificate) {
		c.Spec.Duration = &metav1.Duration{Duration: duration}
		c.Spec.RenewBefore = &metav1.Duration{Duration: renewBefore}
	}
}

func selfSignedClusterIssuer(name string) *cmapi.ClusterIssuer {
	return &cmapi.ClusterIssuer{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
}

func caIssuer(namespace, name, secretName string) *cmapi.Issuer {
	return &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secretName}}},
	}
}

// Waiting on conditions, with a deadline and a dump of what cert-manager did
// when the deadline passes.

const issueTimeout = time.Minute

func eventually(t *testing.T, what string, timeout time.Duration, ok func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		done, err := ok()
		last = err
		return done, nil
	})
	if err == nil {
		return
	}
	dumpCertManagerObjects(t)
	t.Fatalf("%s: not true after %s (last error: %v)", what, timeout, last)
}

func waitCertificateReady(t *testing.T, namespace, name string) *cmapi.Certificate {
	t.Helper()
	var crt *cmapi.Certificate
	eventually(t, fmt.Sprintf("Certificate %s/%s Ready", namespace, name), issueTimeout, func() (bool, error) {
		var err error
		crt, err = cm.CertmanagerV1().Certificates(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := certificateCondition(crt, cmapi.CertificateConditionReady)
		return ready != nil && ready.Status == cmmeta.ConditionTrue && ready.ObservedGeneration == crt.Generation, nil
	})
	return crt
}

func waitClusterIssuerReady(t *testing.T, name string) {
	t.Helper()
	eventually(t, "ClusterIssuer "+name+" Ready", issueTimeout, func() (bool, error) {
		iss, err := cm.CertmanagerV1().ClusterIssuers().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return issuerReady(iss.Status), nil
	})
}

func waitIssuerReady(t *testing.T, namespace, name string) {
	t.Helper()
	eventually(t, "Issuer "+namespace+"/"+name+" Ready", issueTimeout, func() (bool, error) {
		iss, err := cm.CertmanagerV1().Issuers(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return issuerReady(iss.Status), nil
	})
}

func certificateCondition(c *cmapi.Certificate, t cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == t {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func issuerReady(s cmapi.IssuerStatus) bool {
	for _, cond := range s.Conditions {
		if cond.Type == cmapi.IssuerConditionReady {
			return cond.Status == cmmeta.ConditionTrue
		}
	}
	return false
}

// dumpCertManagerObjects logs every cert-manager object and its status, so a
// failed wait shows which controller stopped where.
func dumpCertManagerObjects(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if l, err := cm.CertmanagerV1().ClusterIssuers().List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			t.Logf("ClusterIssuer %s: %+v", o.Name, o.Status.Conditions)
		}
	}
	if l, err := cm.CertmanagerV1().Issuers("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			t.Logf("Issuer %s/%s: %+v", o.Namespace, o.Name, o.Status.Conditions)
		}
	}
	if l, err := cm.CertmanagerV1().Certificates("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			t.Logf("Certificate %s/%s: revision=%v notAfter=%v renewalTime=%v %+v",
				o.Namespace, o.Name, ptrString(o.Status.Revision), o.Status.NotAfter, o.Status.RenewalTime, o.Status.Conditions)
		}
	}
	if l, err := cm.CertmanagerV1().CertificateRequests("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			t.Logf("CertificateRequest %s/%s: %+v", o.Namespace, o.Name, o.Status.Conditions)
		}
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

// secretCertificates reads a Certificate's Secret and parses tls.crt (the
// chain, leaf first) and ca.crt.
func secretCertificates(t *testing.T, namespace, name string) (chain []*x509.Certificate, ca *x509.Certificate, secret *corev1.Secret) {
	t.Helper()
	secret, err := kube.CoreV1().Secrets(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Secret %s/%s: %v", namespace, name, err)
	}
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt"} {
		if len(secret.Data[key]) == 0 {
			t.Fatalf("Secret %s/%s has no %s", namespace, name, key)
		}
	}
	chain = parsePEMCertificates(t, secret.Data[corev1.TLSCertKey])
	cas := parsePEMCertificates(t, secret.Data["ca.crt"])
	return chain, cas[0], secret
}

func parsePEMCertificates(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("parsing a certificate: %v", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("no PEM certificate in %q", data)
	}
	return out
}
