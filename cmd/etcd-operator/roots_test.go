package main

import (
	"crypto/x509"
	"os"
	"os/exec"
	"testing"
)

// TestRootsWithoutSystemCertificates runs itself with no system CA
// certificates to find, as in the operator's image: the embedded roots are
// there, so the agents can verify a public S3 endpoint's certificate.
func TestRootsWithoutSystemCertificates(t *testing.T) {
	if os.Getenv("ROOTS_CHILD") == "1" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			t.Fatalf("no system pool: %v", err)
		}
		//nolint:staticcheck // Subjects lists the roots of a pool that is not the platform verifier's.
		if n := len(pool.Subjects()); n < 50 {
			t.Fatalf("the pool holds %d roots; the embedded set has well over a hundred", n)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRootsWithoutSystemCertificates$", "-test.count=1")
	empty := t.TempDir()
	cmd.Env = append(os.Environ(), "ROOTS_CHILD=1", "SSL_CERT_FILE="+empty+"/none.pem", "SSL_CERT_DIR="+empty)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("without system certificates: %v\n%s", err, out)
	}
}
