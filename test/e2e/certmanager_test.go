package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/tools"
)

var certManagerOnce struct {
	sync.Once
	err error
}

// installCertManager runs cert-manager's real controllers in the sandbox,
// once for every suite that needs them.
func installCertManager(t *testing.T) {
	t.Helper()
	certManagerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		certManagerOnce.err = sb.InstallCertManager(ctx, 5*time.Minute)
	})
	if certManagerOnce.err != nil {
		t.Fatalf("installing cert-manager in the sandbox: %v", certManagerOnce.err)
	}
}

// TestCertManager runs the example of docs/security.md as written: a CA
// Issuer bootstrapped from a self-signed one, and a cluster whose
// certificates on both planes cert-manager's real controllers issue from
// it. A writer with the operator-client certificate cert-manager issued
// writes throughout; the cluster grows 3 → 5 and shrinks back to 3; a
// client without a certificate is refused.
func TestCertManager(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-certmanager")
	installCertManager(t)
	const name = "issued"
	doc := docExample(t, "docs/security.md", "metadata: {name: selfsigned}")
	if out, err := kubectlStdin(doc, "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the example of docs/security.md: %v\n%s", err, out)
	}

	clientCert := issuedClient(t, ns, name)
	w := startWriter(t, ns, name)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w.requireWritesAfter("", 20, time.Minute)
	for _, n := range []int32{5, 3} {
		setReplicas(t, ns, name, n)
		waitReconciled(t, ns, name, int(n), 5*time.Minute)
	}
	w.mark("scaled")
	w.requireWritesAfter("scaled", 1, time.Minute)
	w.verify("scaled")

	if err := readWith(ns, name, nil); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := readWith(ns, name, &clientCert); err != nil {
		t.Errorf("a client with the issued certificate was refused: %v", err)
	}
	certs := &unstructured.UnstructuredList{}
	certs.SetGroupVersionKind(build.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := k.List(context.Background(), certs, client.InNamespace(ns), client.MatchingLabels{build.LabelInstance: name}); err != nil || len(certs.Items) != 3 {
		t.Errorf("Certificates labelled for %s: %d (err %v), want 3", name, len(certs.Items), err)
	}
}

// issuedClient waits for the operator-client Secret cert-manager writes and
// registers the client TLS of the cluster with it; it returns the client
// certificate.
func issuedClient(t *testing.T, ns, cluster string) tls.Certificate {
	t.Helper()
	secret := &corev1.Secret{}
	eventually(t, 3*time.Minute, "cert-manager writes "+cluster+"-operator-client-tls", func() (bool, string) {
		err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster + "-operator-client-tls"}, secret)
		if err != nil {
			return false, err.Error()
		}
		return len(secret.Data["tls.crt"]) > 0 && len(secret.Data["ca.crt"]) > 0, fmt.Sprintf("keys of %d bytes", len(secret.Data["tls.crt"]))
	})
	cert, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data["ca.crt"])
	clientTLS.Store(ns+"/"+cluster, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	return cert
}

// docExample returns the YAML block of a document that contains marker, so
// that the test runs the example exactly as the document shows it.
func docExample(t *testing.T, doc, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tools.RepoRoot(), doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("%s has no YAML block with %q", doc, marker)
	return ""
}
