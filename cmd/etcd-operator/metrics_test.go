package main

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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// issue writes a certificate for the metrics Service's name, signed by a
// new CA, into dir as tls.crt and tls.key, and returns a pool of that CA.
func issue(t *testing.T, dir string, serial int64) *x509.CertPool {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metrics CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), DNSNames: []string{"eo-etcd-operator-metrics.ops.svc"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	// Written as the kubelet updates a mounted Secret: new files, renamed in.
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// With --metrics-cert-dir the metrics are served with the certificate found
// there, which a scraper verifies against its CA and the Service's name
// (the chart's ServiceMonitor does so with cert-manager's Secret), and a
// renewed certificate is served without a restart. A directory without the
// files is refused at start: controller-runtime would otherwise serve a
// self-signed certificate no verifying scraper accepts.
func TestMetricsServedWithTheMountedCertificate(t *testing.T) {
	dir := t.TempDir()
	if err := metricsCertProblem(dir); err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("an empty directory: %v", err)
	}
	pool := issue(t, dir, 100)
	if err := metricsCertProblem(dir); err != nil {
		t.Fatal(err)
	}
	o := metricsOptions(options{metricsAddr: "127.0.0.1:0", metricsSecure: true, metricsCertDir: dir})
	o.FilterProvider = nil // authorization needs an API server; the certificate is what is tested
	srv, err := metricsserver.NewServer(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Start(ctx) }()
	addr := func() string {
		a, _ := srv.(interface{ GetBindAddr() string })
		return a.GetBindAddr()
	}
	serial := func(pool *x509.CertPool) (int64, error) {
		conn, err := tls.Dial("tcp", addr(), &tls.Config{RootCAs: pool, ServerName: "eo-etcd-operator-metrics.ops.svc", MinVersion: tls.VersionTLS12})
		if err != nil {
			return 0, err
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, err := serial(pool)
		return err == nil && n == 100, nil
	})
	if err != nil {
		t.Fatalf("the mounted certificate was not served and verified: %v", err)
	}
	renewed := issue(t, dir, 200)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, err := serial(renewed)
		return err == nil && n == 200, nil
	})
	if err != nil {
		t.Errorf("the renewed certificate was not served: %v", err)
	}
}
