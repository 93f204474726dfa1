package migrate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// ca is a throw-away certificate authority for the tests.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serialNo int64

func newTestCA(t *testing.T, cn string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serialNo++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serialNo), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for both usages and returns tls.crt and tls.key.
func (c *ca) issue(t *testing.T, cn string, dns ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serialNo++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serialNo), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
}

func pair(c *ca, t *testing.T, cn string, dns ...string) map[string][]byte {
	crt, key := c.issue(t, cn, dns...)
	return map[string][]byte{"tls.crt": crt, "tls.key": key}
}

// legacyTLSSpec names every legacy TLS Secret and turns auth on.
var legacyTLSSpec = []func(map[string]any){
	set([]string{"security", "enableAuth"}, true),
	set([]string{"security", "tls", "serverSecret"}, "server"),
	set([]string{"security", "tls", "serverTrustedCASecret"}, "server-ca"),
	set([]string{"security", "tls", "clientTrustedCASecret"}, "client-ca"),
	set([]string{"security", "tls", "clientSecret"}, "op"),
	set([]string{"security", "tls", "peerSecret"}, "peer"),
	set([]string{"security", "tls", "peerTrustedCASecret"}, "peer-ca"),
}

func inspectTLS(t *testing.T, objs ...client.Object) *Live {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	lv := &Live{Legacy: legacy(t, legacyTLSSpec...)}
	for _, name := range []string{"db-0", "db-1", "db-2"} {
		lv.Pods = append(lv.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}})
	}
	if err := lv.readTLS(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if err := lv.readAuth(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return lv
}

// TestLegacyTLS: the legacy layout (three CAs in Secrets of their own, the
// server CA under tls.crt as the legacy operator read it) is accepted when
// every certificate verifies for the names the operator dials; the CAs the
// new API reads from ca.crt of the certificate Secrets are planned exactly
// once, and a Secret that holds them already needs nothing.
func TestLegacyTLS(t *testing.T) {
	serverCA, clientCA, peerCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca"), newTestCA(t, "peer-ca")
	both := []string{"*.db-headless.ns.svc", "*.db.ns.svc", "db-client.ns.svc"}
	objs := []client.Object{
		secret("server", pair(serverCA, t, "server", both...)),
		secret("server-ca", map[string][]byte{"tls.crt": serverCA.pem}),
		secret("client-ca", map[string][]byte{"ca.crt": clientCA.pem}),
		secret("op", pair(clientCA, t, "root")),
		secret("peer", pair(peerCA, t, "peer", both...)),
		secret("peer-ca", map[string][]byte{"ca.crt": peerCA.pem}),
	}
	lv := inspectTLS(t, objs...)
	if len(lv.Problems) > 0 {
		t.Fatalf("refused: %v", lv.Problems)
	}
	cfg := lv.clientTLS()
	if cfg == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("dial TLS %+v", cfg)
	}
	changes := lv.caChanges()
	got := map[string][]string{}
	for _, c := range changes {
		got[c.Secret] = append(got[c.Secret], c.CA.Subject.CommonName)
	}
	if strings.Join(got["server"], ",") != "server-ca,client-ca" || strings.Join(got["peer"], ",") != "peer-ca" || len(got) != 2 {
		t.Errorf("CA changes %v", got)
	}
	for _, r := range lv.tlsRisks() {
		if strings.Contains(r, "CERTIFICATES:") {
			t.Errorf("certificates naming both domains flagged: %s", r)
		}
	}

	// The Secrets as the apply step leaves them: nothing more to add, and
	// adding again changes no byte.
	server := objs[0].(*corev1.Secret)
	server.Data["ca.crt"] = withCAs(nil, []*x509.Certificate{serverCA.cert, clientCA.cert})
	if again := withCAs(server.Data["ca.crt"], []*x509.Certificate{clientCA.cert}); string(again) != string(server.Data["ca.crt"]) {
		t.Errorf("adding a CA twice changed the bundle")
	}
	objs[4].(*corev1.Secret).Data["ca.crt"] = peerCA.pem
	if changes := inspectTLS(t, objs...).caChanges(); len(changes) != 0 {
		t.Errorf("CA changes after the merge: %v", changes)
	}
}

// TestLegacyTLSRefusals: what would leave the operator unable to reach the
// members refuses the cluster with a message naming the Secret; what would
// only break members added later is a risk.
func TestLegacyTLSRefusals(t *testing.T) {
	serverCA, clientCA, peerCA, other := newTestCA(t, "server-ca"), newTestCA(t, "client-ca"), newTestCA(t, "peer-ca"), newTestCA(t, "other")
	base := func() map[string]*corev1.Secret {
		return map[string]*corev1.Secret{
			"server":    secret("server", pair(serverCA, t, "server", "*.db-headless.ns.svc", "*.db.ns.svc")),
			"server-ca": secret("server-ca", map[string][]byte{"ca.crt": serverCA.pem}),
			"client-ca": secret("client-ca", map[string][]byte{"ca.crt": clientCA.pem}),
			"op":        secret("op", pair(clientCA, t, "root")),
			"peer":      secret("peer", pair(peerCA, t, "peer", "*.db-headless.ns.svc", "*.db.ns.svc")),
			"peer-ca":   secret("peer-ca", map[string][]byte{"ca.crt": peerCA.pem}),
		}
	}
	cases := []struct {
		name    string
		mod     func(s map[string]*corev1.Secret)
		refusal string
		risk    string
	}{{
		name:    "a missing Secret",
		mod:     func(s map[string]*corev1.Secret) { delete(s, "peer-ca") },
		refusal: "Secret peer-ca (spec.security.tls.peerTrustedCASecret) does not exist",
	}, {
		name:    "a server certificate of an unknown CA",
		mod:     func(s map[string]*corev1.Secret) { s["server"].Data = pair(other, t, "server", "*.db-headless.ns.svc") },
		refusal: "signed by no CA",
	}, {
		name: "a server certificate for other names",
		mod: func(s map[string]*corev1.Secret) {
			s["server"].Data = pair(serverCA, t, "server", "*.elsewhere.ns.svc")
		},
		refusal: "does not serve db-0.db-headless.ns.svc",
	}, {
		name:    "an operator certificate the client CA does not accept",
		mod:     func(s map[string]*corev1.Secret) { s["op"].Data = pair(other, t, "root") },
		refusal: "not accepted by the CA in client-ca",
	}, {
		name:    "an operator certificate for another user than root",
		mod:     func(s map[string]*corev1.Secret) { s["op"].Data = pair(clientCA, t, "operator") },
		refusal: `is for user "operator", not root`,
	}, {
		name:    "a key that is not the certificate's",
		mod:     func(s map[string]*corev1.Secret) { s["peer"].Data["tls.key"] = s["op"].Data["tls.key"] },
		refusal: "not a key pair",
	}, {
		name: "per-pod names: members added later could not serve",
		mod: func(s map[string]*corev1.Secret) {
			s["peer"].Data = pair(peerCA, t, "peer", "db-0.db-headless.ns.svc", "db-1.db-headless.ns.svc", "db-2.db-headless.ns.svc")
		},
		risk: "the peer certificate in Secret peer does not name *.db.ns.svc",
	}, {
		name: "a credentials Secret without a password",
		mod: func(s map[string]*corev1.Secret) {
			s["db-root-credentials"] = secret("db-root-credentials", map[string][]byte{"username": []byte("root")})
		},
		refusal: "Secret db-root-credentials exists without a password",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			secrets := base()
			tc.mod(secrets)
			var objs []client.Object
			for _, s := range secrets {
				objs = append(objs, s)
			}
			lv := inspectTLS(t, objs...)
			problems := strings.Join(lv.Problems, "\n")
			if (tc.refusal == "") != (problems == "") || !strings.Contains(problems, tc.refusal) {
				t.Errorf("refusals %q, want one containing %q", problems, tc.refusal)
			}
			if tc.risk != "" && !strings.Contains(strings.Join(lv.tlsRisks(), "\n"), tc.risk) {
				t.Errorf("risks %v, want one containing %q", lv.tlsRisks(), tc.risk)
			}
		})
	}
}

// TestLegacyTLSOnePlane: a cluster with peer certificates only is inspected
// over plain text and only the peer Secret's ca.crt is planned; one with
// server TLS and no client CA is dialled without a client certificate.
func TestLegacyTLSOnePlane(t *testing.T) {
	ca := newTestCA(t, "ca")
	names := []string{"*.db-headless.ns.svc", "*.db.ns.svc"}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	for _, tc := range []struct {
		name       string
		spec       []func(map[string]any)
		dialTLS    bool
		clientCert bool
		changes    string
	}{{
		name:    "peer only",
		spec:    []func(map[string]any){set([]string{"security", "tls", "peerSecret"}, "peer"), set([]string{"security", "tls", "peerTrustedCASecret"}, "ca")},
		changes: "peer",
	}, {
		name:    "server only",
		spec:    []func(map[string]any){set([]string{"security", "tls", "serverSecret"}, "server"), set([]string{"security", "tls", "serverTrustedCASecret"}, "ca")},
		dialTLS: true,
		changes: "server",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
				secret("server", pair(ca, t, "server", names...)),
				secret("peer", pair(ca, t, "peer", names...)),
				secret("ca", map[string][]byte{"ca.crt": ca.pem}),
			).Build()
			lv := &Live{Legacy: legacy(t, tc.spec...)}
			lv.Pods = []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns"}}}
			if err := lv.readTLS(context.Background(), c); err != nil || len(lv.Problems) > 0 {
				t.Fatalf("err %v, refusals %v", err, lv.Problems)
			}
			cfg := lv.clientTLS()
			if (cfg != nil) != tc.dialTLS || (cfg != nil && len(cfg.Certificates) > 0) {
				t.Errorf("dial TLS %+v", cfg)
			}
			changes := lv.caChanges()
			if len(changes) != 1 || changes[0].Secret != tc.changes {
				t.Errorf("CA changes %v, want one for %s", changes, tc.changes)
			}
		})
	}
}
