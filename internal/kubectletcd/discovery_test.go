package kubectletcd

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// selfSigned returns a PEM certificate and key that also serve as the CA.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func tlsSecret(t *testing.T, name string, withKeyPair bool) *corev1.Secret {
	cert, key := selfSigned(t)
	data := map[string]string{"ca.crt": string(cert)}
	if withKeyPair {
		data["tls.crt"], data["tls.key"] = string(cert), string(key)
	}
	return secret(name, data)
}

// foreignPod runs etcd with the given TLS flags and a Secret mounted at
// /certs, as someone might without the operator.
func foreignPod(secretName string, flags ...string) *corev1.Pod {
	p := memberPod("", "foreign")
	p.Labels = nil
	c := &p.Spec.Containers[0]
	c.Name = "server"
	c.Command = []string{"/usr/local/bin/etcd"}
	c.Args = append([]string{"--advertise-client-urls", "https://$(POD_NAME).db.ns.svc:2379"}, flags...)
	c.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "certs", MountPath: "/certs/"}}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName}}},
	}
	return p
}

func TestTLSFromAForeignPodsFlags(t *testing.T) {
	cases := []struct {
		name    string
		flags   []string
		secret  *corev1.Secret
		mtls    bool
		wantErr string
	}{
		{name: "plaintext", flags: nil},
		{name: "server TLS", flags: []string{"--cert-file=/certs/tls.crt", "--key-file=/certs/tls.key"}, secret: tlsSecret(t, "s", true)},
		{name: "mTLS by --client-cert-auth", flags: []string{"--cert-file", "/certs/tls.crt", "--client-cert-auth"}, secret: tlsSecret(t, "s", true), mtls: true},
		{name: "mTLS by --trusted-ca-file", flags: []string{"--cert-file=/certs/tls.crt", "--trusted-ca-file=/certs/ca.crt"}, secret: tlsSecret(t, "s", true), mtls: true},
		{name: "client-cert-auth off", flags: []string{"--cert-file=/certs/tls.crt", "--client-cert-auth=false"}, secret: tlsSecret(t, "s", true)},
		{name: "no ca.crt", flags: []string{"--cert-file=/certs/tls.crt"}, secret: secret("s", map[string]string{"tls.crt": "x"}), wantErr: "has no usable ca.crt"},
		{name: "mTLS without a key pair", flags: []string{"--cert-file=/certs/tls.crt", "--client-cert-auth=true"}, secret: tlsSecret(t, "s", false), wantErr: "no usable tls.crt/tls.key"},
		{name: "cert not on a Secret", flags: []string{"--cert-file=/elsewhere/tls.crt"}, secret: tlsSecret(t, "s", true), wantErr: "no Secret volume is mounted at /elsewhere/tls.crt"},
		{name: "Secret missing", flags: []string{"--cert-file=/certs/tls.crt"}, wantErr: `secret "s" not found in namespace "ns"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := foreignPod("s", c.flags...)
			objs := []client.Object{pod}
			if c.secret != nil {
				objs = append(objs, c.secret)
			}
			env := newFakeEnv(t, newFakeEtcd("foreign"), objs...)
			s, err := openSession(context.Background(), env.deps(), &Options{Pod: "foreign"})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkForeignTLS(t, env, s, pod, len(c.flags) > 0, c.mtls)
		})
	}
}

func checkForeignTLS(t *testing.T, env *fakeEnv, s *session, pod *corev1.Pod, secure, mtls bool) {
	t.Helper()
	if (s.sec.TLS != nil) != secure {
		t.Fatalf("TLS %v, want %t", s.sec.TLS, secure)
	}
	if s.sec.TLS != nil && (len(s.sec.TLS.Certificates) == 1) != mtls {
		t.Errorf("client certificate: %d, want mTLS %t", len(s.sec.TLS.Certificates), mtls)
	}
	// The member is dialled at its own name, with $(POD_NAME) expanded.
	if _, err := s.connect(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	ep := env.dialled[0].Endpoints[0]
	scheme := "http"
	if secure {
		scheme = "https"
	}
	if !strings.HasPrefix(ep, scheme+"://foreign.db.ns.svc:3") {
		t.Errorf("endpoint %s: want the advertised host and the forwarded port", ep)
	}
	if ip, ok := env.dialled[0].Resolve("foreign.db.ns.svc"); !ok || ip != "127.0.0.1" {
		t.Errorf("the advertised host resolves to %s, want the local end of the forward", ip)
	}
}

func TestTLSFromTheCluster(t *testing.T) {
	mtls := func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{
			ServerSecretRef:         &corev1.LocalObjectReference{Name: "server"},
			OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "client"},
		}}
	}
	env := newFakeEnv(t, newFakeEtcd("c-a"), cluster("c", mtls), memberPod("c", "c-a"), tlsSecret(t, "server", true), tlsSecret(t, "client", true))
	for _, o := range []Options{{Cluster: "c"}, {Pod: "c-a"}} {
		s, err := openSession(context.Background(), env.deps(), &o)
		if err != nil {
			t.Fatal(err)
		}
		if s.sec.TLS == nil || len(s.sec.TLS.Certificates) != 1 || !strings.Contains(s.sec.TLSFrom, "etcdcluster c") {
			t.Errorf("%+v: TLS %v from %q, want the operator's client certificate", o, s.sec.TLS, s.sec.TLSFrom)
		}
	}
	broken := newFakeEnv(t, newFakeEtcd("c-a"), cluster("c", mtls), memberPod("c", "c-a"), tlsSecret(t, "server", true))
	if _, err := openSession(context.Background(), broken.deps(), &Options{Cluster: "c"}); err == nil || !strings.Contains(err.Error(), "client TLS of etcdcluster c") {
		t.Errorf("missing client Secret: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	auth := func(latched bool) func(*v1alpha2.EtcdCluster) {
		return func(c *v1alpha2.EtcdCluster) {
			c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
			c.Status.AuthEnabled = latched
		}
	}
	objs := func(c *v1alpha2.EtcdCluster) []client.Object {
		other := secret("elsewhere", map[string]string{"username": "admin", "password": "pw2"})
		other.Namespace = "other"
		return []client.Object{c, memberPod("c", "c-a"), secret("root", map[string]string{"password": "pw"}), secret("nopw", map[string]string{"username": "x"}), other}
	}
	cases := []struct {
		name       string
		cluster    *v1alpha2.EtcdCluster
		flag       string
		user, pass string
		wantErr    string
	}{
		{name: "none", cluster: cluster("c")},
		{name: "auth latched", cluster: cluster("c", auth(true)), user: "root", pass: "pw"},
		{name: "auth asked, not latched", cluster: cluster("c", auth(false))},
		{name: "-s NAME, username defaults to root", cluster: cluster("c"), flag: "root", user: "root", pass: "pw"},
		{name: "-s NAMESPACE/NAME wins", cluster: cluster("c", auth(true)), flag: "other/elsewhere", user: "admin", pass: "pw2"},
		{name: "-s without password", cluster: cluster("c"), flag: "nopw", wantErr: `secret ns/nopw has no "password" key`},
		{name: "-s missing", cluster: cluster("c"), flag: "gone", wantErr: `secret "gone" not found in namespace "ns"`},
		{name: "-s malformed", cluster: cluster("c"), flag: "a/b/c", wantErr: "want NAME or NAMESPACE/NAME"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := newFakeEnv(t, newFakeEtcd("c-a"), objs(c.cluster)...)
			s, err := openSession(context.Background(), env.deps(), &Options{Cluster: "c", CredentialsSecret: c.flag})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.sec.Username != c.user || s.sec.Password != c.pass {
				t.Errorf("credentials %q/%q, want %q/%q", s.sec.Username, s.sec.Password, c.user, c.pass)
			}
		})
	}
}

func TestAuthErrorsSayWhatToDo(t *testing.T) {
	e := newFakeEtcd("c-a")
	e.user, e.password = "root", "pw"
	auth := func(c *v1alpha2.EtcdCluster) {
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
	}
	env := newFakeEnv(t, e, cluster("c", auth), memberPod("c", "c-a"),
		secret("root", map[string]string{"password": "pw"}), secret("wrong", map[string]string{"password": "nope"}))
	if code, _, errOut := env.run("members", "-c", "c"); code != 0 {
		t.Errorf("members are told to anyone: exit %d, %q", code, errOut)
	}
	code, _, errOut := env.run("alarm", "list", "-c", "c")
	if code != 1 || !strings.Contains(errOut, "etcd requires authentication and no credentials were given or found") ||
		!strings.Contains(errOut, "status.authEnabled is not set") || !strings.Contains(errOut, "pass -s/--credentials-secret") {
		t.Errorf("no credentials: exit %d, %q", code, errOut)
	}
	if code, _, errOut = env.run("status", "-c", "c", "-s", "wrong"); code != 1 || !strings.Contains(errOut, "etcd rejected the credentials of user root from secret ns/wrong") ||
		strings.Count(errOut, "rejected") != 1 {
		t.Errorf("wrong credentials: exit %d, %q", code, errOut)
	}
	if code, _, errOut = env.run("status", "-c", "c", "-s", "root"); code != 0 {
		t.Errorf("-s: exit %d, %q", code, errOut)
	}
	if env.dialled[len(env.dialled)-1].Username != "root" {
		t.Errorf("dialled without the user")
	}
}

// A learner refuses to log anyone in: its row is read with a token that a
// voter issued.
func TestLearnerIsReadLoggedInThroughAVoter(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b")
	e.user, e.password = "root", "pw"
	e.members[1].IsLearner = true
	auth := func(c *v1alpha2.EtcdCluster) {
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
		c.Status.AuthEnabled = true
	}
	learner := func(p *corev1.Pod) { delete(p.Labels, manifest.LabelRole) }
	env := newFakeEnv(t, e, cluster("c", auth), memberPod("c", "c-a"), memberPod("c", "c-b", learner),
		secret("root", map[string]string{"password": "pw"}))
	code, out, errOut := env.run("status", "-c", "c")
	if code != 0 || strings.Contains(out+errOut, "learner") && strings.Contains(out+errOut, "not supported") {
		t.Fatalf("status with a learner: exit %d, %q %q", code, out, errOut)
	}
	for _, cfg := range env.dialled {
		if len(cfg.LoginVia) == 0 && strings.Contains(cfg.Endpoints[0], ":30001") {
			t.Errorf("the learner was dialled without a voter to log in through: %+v", cfg)
		}
	}
}
