package metrics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
)

// certPEM makes a self-signed certificate that expires at end.
func certPEM(t *testing.T, end time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd"},
		NotBefore: end.Add(-48 * time.Hour), NotAfter: end}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestCertificateExpiry checks the gauge takes the first certificate of a
// bundle to expire, skips keys that hold no certificate, and drops the
// series of a Secret the members no longer mount.
func TestCertificateExpiry(t *testing.T) {
	soon := time.Date(2027, 1, 10, 0, 0, 0, 0, time.UTC)
	later := soon.Add(300 * 24 * time.Hour)
	bundle := append(certPEM(t, later), certPEM(t, soon)...)
	reg := prometheus.NewRegistry()
	m := New(reg, "v1.2.3")
	secrets := map[string]*corev1.Secret{
		"db-peer": {Data: map[string][]byte{"tls.crt": certPEM(t, later), "ca.crt": bundle, "tls.key": []byte("-----BEGIN EC PRIVATE KEY-----\nMHc=\n-----END EC PRIVATE KEY-----\n")}},
		"db-auth": {Data: map[string][]byte{"password": []byte("hunter2")}},
	}
	m.ObserveCertificates("prod", "db", secrets)
	if n := testutil.CollectAndCount(m.certificateExpiry); n != 2 {
		t.Errorf("%d series, want 2 (tls.crt and ca.crt of db-peer)", n)
	}
	if got := testutil.ToFloat64(m.certificateExpiry.WithLabelValues("prod", "db", "db-peer", "ca.crt")); got != float64(soon.Unix()) {
		t.Errorf("the bundle expires at %v, want its first certificate's end %v", time.Unix(int64(got), 0).UTC(), soon)
	}
	m.ObserveCertificates("prod", "db", map[string]*corev1.Secret{"db-auth": secrets["db-auth"]})
	if n := testutil.CollectAndCount(m.certificateExpiry); n != 0 {
		t.Errorf("%d series after the TLS Secret was unmounted, want 0", n)
	}
	if _, ok := EarliestExpiry([]byte("not PEM at all")); ok {
		t.Error("an expiry found in bytes that hold no certificate")
	}
}

// TestDefragAndRestoreCounts checks a failed run is counted by its reason
// without moving the last-success gauges, and Forget drops a cluster's
// day-two series.
func TestDefragAndRestoreCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, "v1.2.3")
	end := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	m.DefragFinished(DefragResult{Namespace: "prod", Cluster: "db", Policy: "nightly", Result: DefragComplete, Completed: end, Duration: 3 * time.Second, ReclaimedBytes: 4096})
	m.DefragFinished(DefragResult{Namespace: "prod", Cluster: "db", Result: "DeadlineExceeded", Completed: end.Add(time.Hour)})
	if got := testutil.ToFloat64(m.lastDefrag.With(clusterOf("prod", "db"))); got != float64(end.Unix()) {
		t.Errorf("last success at %v, want the complete run's end", got)
	}
	if got := testutil.ToFloat64(m.lastDefragReclaimed.With(clusterOf("prod", "db"))); got != 4096 {
		t.Errorf("reclaimed %v, want 4096", got)
	}
	if got := testutil.ToFloat64(m.defrags.WithLabelValues("prod", "db", "", "DeadlineExceeded")); got != 1 {
		t.Errorf("failed runs counted %v, want 1", got)
	}
	m.RestoreFinished("prod", "db", Restored)
	m.QuorumRecovered("prod", "db", "snapshot")
	m.Forget("prod", "db")
	for name, c := range map[string]prometheus.Collector{"defrags": m.defrags, "last defrag": m.lastDefrag, "restores": m.restores, "recoveries": m.recoveries} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series after Forget", name, n)
		}
	}
}
