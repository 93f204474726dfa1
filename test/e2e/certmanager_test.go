package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
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
// writes throughout; the cluster grows 3 → 5 and shrinks back to 3. Then
// the drills of docs/security.md, each rolled out member by member: the
// server and the peer certificates are renewed (forced, with a one-hour
// duration), and the CA is replaced (both CAs trusted, then the Issuer
// switched to the new CA and every certificate renewed). Every member ends
// serving the new certificates, a client certificate of the retired CA and
// a client without one are refused.
func TestCertManager(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-certmanager")
	installCertManager(t)
	const name = "issued"
	doc := docExample(t, "docs/security.md", "metadata: {name: selfsigned}")
	if out, err := kubectlStdin(doc, "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the example of docs/security.md: %v\n%s", err, out)
	}
	// The CA that replaces etcd-ca later; clients trust both throughout.
	next := docExample(t, "docs/security.md", "metadata: {name: etcd-ca-next}")
	if out, err := kubectlStdin(next, "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the new CA of docs/security.md: %v\n%s", err, out)
	}
	nextCA := secretData(t, ns, "etcd-ca-next", "tls.crt")
	oldCA := secretData(t, ns, name+"-server-tls", "ca.crt")

	var clientCert atomic.Pointer[tls.Certificate]
	clientCert.Store(issuedPair(t, ns, name+"-operator-client-tls"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(oldCA)
	pool.AppendCertsFromPEM(nextCA)
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return clientCert.Load(), nil }})

	w := startWriter(t, ns, name)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w.requireWritesAfter("", 20, time.Minute)
	for _, n := range []int32{5, 3} {
		setReplicas(t, ns, name, n)
		waitReconciled(t, ns, name, int(n), 5*time.Minute)
	}
	w.mark("scaled")
	w.requireWritesAfter("scaled", 1, time.Minute)

	// Renewals forced the way `cmctl renew` forces them, with a short
	// duration so that the new certificate is recognisably the renewed
	// one: cert-manager issues it, and the operator rolls it out.
	r := &rotation{t: t, ns: ns, name: name, w: w, clientCert: &clientCert}
	for _, plane := range []struct{ certificate, secret, port string }{
		{name + "-server", name + "-server-tls", "2379"},
		{name + "-peer", name + "-peer-tls", "2380"},
	} {
		var renewed *x509.Certificate
		r.roll("renew "+plane.certificate, func() {
			old := secretLeaf(t, ns, plane.secret)
			renewCertificate(t, ns, plane.certificate, "1h0m0s")
			eventually(t, 2*time.Minute, "cert-manager renews "+plane.certificate, func() (bool, string) {
				renewed = secretLeaf(t, ns, plane.secret)
				return renewed.SerialNumber.Cmp(old.SerialNumber) != 0, "serial " + renewed.SerialNumber.String()
			})
		})
		if life := renewed.NotAfter.Sub(renewed.NotBefore); life > 2*time.Hour {
			t.Errorf("the renewed %s lives %s, not the hour asked for", plane.certificate, life)
		}
		r.servingSerial(plane.port, renewed.SerialNumber)
	}

	// A new CA, as docs/security.md says: both CAs into ca.crt first.
	both := append(append([]byte{}, oldCA...), nextCA...)
	r.rotate("trust both CAs", map[string]map[string][]byte{name + "-server-tls": {"ca.crt": both}, name + "-peer-tls": {"ca.crt": both}})
	oldClient := clientCert.Load()
	// Then the Issuer signs with the new CA and every certificate is
	// renewed; cert-manager writes only the new CA into ca.crt.
	r.roll("certificates from the new CA", func() {
		if out, err := kubectl("-n", ns, "patch", "issuer", "etcd-ca", "--type=merge", "-p", `{"spec":{"ca":{"secretName":"etcd-ca-next"}}}`); err != nil {
			t.Fatalf("switching the Issuer to the new CA: %v\n%s", err, out)
		}
		for _, c := range []string{"-operator-client", "-server", "-peer"} {
			renewCertificate(t, ns, name+c, "")
		}
		for _, secret := range []string{"-operator-client-tls", "-server-tls", "-peer-tls"} {
			eventually(t, 2*time.Minute, "cert-manager issues "+name+secret+" from the new CA", func() (bool, string) {
				leaf := secretLeaf(t, ns, name+secret)
				return leaf.Issuer.CommonName == "etcd-ca-next", "issued by " + leaf.Issuer.CommonName
			})
		}
		clientCert.Store(issuedPair(t, ns, name+"-operator-client-tls"))
	})
	r.servingSerial("2379", secretLeaf(t, ns, name+"-server-tls").SerialNumber)
	r.servingSerial("2380", secretLeaf(t, ns, name+"-peer-tls").SerialNumber)
	w.verify("certificates from the new CA rolled")

	if err := readWith(ns, name, oldClient); err == nil {
		t.Error("a client certificate of the retired CA was accepted after the roll-out")
	}
	if err := readWith(ns, name, nil); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := readWith(ns, name, clientCert.Load()); err != nil {
		t.Errorf("a client with the issued certificate was refused: %v", err)
	}
	certs := &unstructured.UnstructuredList{}
	certs.SetGroupVersionKind(manifest.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := k.List(context.Background(), certs, client.InNamespace(ns), client.MatchingLabels{manifest.LabelInstance: name}); err != nil || len(certs.Items) != 3 {
		t.Errorf("Certificates labelled for %s: %d (err %v), want 3", name, len(certs.Items), err)
	}
}

// secretData waits for a key of a Secret (cert-manager writes them) and
// returns it.
func secretData(t *testing.T, ns, name, key string) []byte {
	t.Helper()
	secret := &corev1.Secret{}
	eventually(t, 3*time.Minute, "Secret "+name+" has "+key, func() (bool, string) {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
			return false, err.Error()
		}
		return len(secret.Data[key]) > 0, "not yet"
	})
	return secret.Data[key]
}

// issuedPair is the certificate and key of a TLS Secret cert-manager wrote.
func issuedPair(t *testing.T, ns, name string) *tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(secretData(t, ns, name, "tls.crt"), secretData(t, ns, name, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &cert
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
			return dedent(block)
		}
	}
	t.Fatalf("%s has no YAML block with %q", doc, marker)
	return ""
}

// dedent removes the indentation a block has inside a list item.
func dedent(block string) string {
	lines := strings.Split(block, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// secretLeaf is the certificate in a TLS Secret.
func secretLeaf(t *testing.T, ns, name string) *x509.Certificate {
	t.Helper()
	secret := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatalf("Secret %s has no certificate in tls.crt", name)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// renewCertificate gives a Certificate a new duration (unless "") and asks
// cert-manager to issue it again now, as `cmctl renew` does: an Issuing condition with
// the reason ManuallyTriggered.
func renewCertificate(t *testing.T, ns, name, duration string) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: name}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(manifest.CertificateGVK)
		if err := k.Get(ctx, key, u); err != nil {
			return err
		}
		if duration == "" {
			return nil
		}
		if err := unstructured.SetNestedField(u.Object, duration, "spec", "duration"); err != nil {
			return err
		}
		return k.Update(ctx, u)
	})
	if err != nil {
		t.Fatalf("setting the duration of Certificate %s: %v", name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(manifest.CertificateGVK)
		if err := k.Get(ctx, key, u); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		kept := []any{}
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Issuing" {
				continue
			}
			kept = append(kept, c)
		}
		kept = append(kept, map[string]any{
			"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
			"message": "renewal forced by the e2e suite", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		})
		if err := unstructured.SetNestedSlice(u.Object, kept, "status", "conditions"); err != nil {
			return err
		}
		return k.Status().Update(ctx, u)
	})
	if err != nil {
		t.Fatalf("asking cert-manager to renew Certificate %s: %v", name, err)
	}
}
