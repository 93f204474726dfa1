package etcdconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/pki"
)

type ca struct{ *pki.CA }

func newCA(t *testing.T, cn string) *ca {
	t.Helper()
	c, err := pki.NewCA(cn)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{c}
}

// issue returns a certificate and key in PEM for localhost.
func (c *ca) issue(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	p, err := c.Issue(pki.Request{CommonName: cn, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	return p.CertPEM, p.KeyPEM
}

func (c *ca) secret(t *testing.T, name string) *corev1.Secret {
	crt, key := c.issue(t, name)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Data: map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": c.CertPEM()}}
}

// serve runs a TLS server with a certificate of server's CA that asks for
// a client certificate of clients' CA; it reports each handshake's
// outcome.
func serve(t *testing.T, server, clients *ca) (string, <-chan error) {
	t.Helper()
	crt, key := server.issue(t, "member")
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clients.Cert)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	out := make(chan error, 4)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			out <- conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	return l.Addr().String(), out
}

// During a hand-over the operator reaches members on either side: it
// trusts both CAs and presents, of its old and new client certificates,
// the one the member asks for. Out of one, it trusts the spec's material
// alone.
func TestTLSDuringAHandover(t *testing.T) {
	oldCA, newCA := newCA(t, "own CA"), newCA(t, "etcd-ca")
	trust := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-tls-handover", Namespace: "ns"},
		Data: map[string][]byte{manifest.KeyClientCA: append(oldCA.CertPEM(), newCA.CertPEM()...)}}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(oldCA.secret(t, "own-server"), oldCA.secret(t, "own-operator"),
		newCA.secret(t, "c-server-tls"), newCA.secret(t, "c-operator-client-tls"), trust).Build()
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{
		ServerIssuerRef: v1alpha2.IssuerReference{Name: "ca"}, OperatorClientIssuerRef: &v1alpha2.IssuerReference{Name: "ca"}}}}
	c.Status.OperatorClientSecret = "own-operator"
	member := func(server string, trusting bool) *v1alpha2.EtcdMember {
		m := &v1alpha2.EtcdMember{}
		m.Spec.TLS = &v1alpha2.MemberTLS{ClientServerSecretRef: &corev1.LocalObjectReference{Name: server}, ClientMTLS: true}
		if trusting {
			m.Spec.TLS.TrustedCASecretRef = &corev1.LocalObjectReference{Name: "c-tls-handover"}
		}
		return m
	}
	ctx := context.Background()
	cfg, err := TLS(ctx, r, c, member("own-server", false), member("own-server", true), member("c-server-tls", true))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 2 {
		t.Fatalf("%d client certificates offered, want the new and the old", len(cfg.Certificates))
	}
	for _, side := range []struct {
		name            string
		server, clients *ca
	}{
		{"member on the old material", oldCA, oldCA},
		{"member trusting both, old certificate", oldCA, newCA},
		{"member on the new material", newCA, newCA},
	} {
		addr, handshakes := serve(t, side.server, side.clients)
		conn, err := tls.Dial("tcp", addr, withName(cfg))
		if err == nil {
			err = conn.Handshake()
			_ = conn.Close()
		}
		if err == nil {
			err = <-handshakes
		}
		if err != nil {
			t.Errorf("%s: %v", side.name, err)
		}
	}

	// Out of a hand-over: the spec's material alone.
	cfg, err = TLS(ctx, r, c, member("c-server-tls", false))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 {
		t.Errorf("%d client certificates offered out of a hand-over, want the spec's alone", len(cfg.Certificates))
	}
	addr, _ := serve(t, oldCA, oldCA)
	if conn, err := tls.Dial("tcp", addr, withName(cfg)); err == nil {
		_ = conn.Close()
		t.Error("a server of the old CA was trusted once the hand-over is over")
	}
}

func withName(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	c.ServerName = "localhost"
	return c
}
