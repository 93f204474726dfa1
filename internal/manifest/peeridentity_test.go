package manifest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/pki"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// peerCluster is a cluster whose peer plane cert-manager issues.
func peerCluster(peer *v1alpha2.PeerTLS) *v1alpha2.EtcdCluster {
	return &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec:       v1alpha2.EtcdClusterSpec{TLS: &v1alpha2.EtcdClusterTLS{Peer: peer}},
	}
}

func cmPeer() *v1alpha2.PeerTLS {
	return &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: v1alpha2.IssuerReference{Name: "ca"}}}
}

// The members accept as peers what the user lists, or, with cert-manager
// and no list, the one name the certificate the operator asks for covers.
func TestPeerIdentity(t *testing.T) {
	for _, tc := range []struct {
		name       string
		peer       *v1alpha2.PeerTLS
		hosts, cns []string
	}{
		{name: "cert-manager restricts to the members' wildcard", peer: cmPeer(), hosts: []string{"peer.c.ns.svc"}},
		{name: "own Secret without a list accepts what the CA signed", peer: &v1alpha2.PeerTLS{SecretRef: ref("peer")}},
		{name: "own Secret with hostnames", peer: &v1alpha2.PeerTLS{SecretRef: ref("peer"), AllowedHostnames: []string{"a.example", "b.example"}},
			hosts: []string{"a.example", "b.example"}},
		{name: "cert-manager with common names", peer: func() *v1alpha2.PeerTLS { p := cmPeer(); p.AllowedCommonNames = []string{"etcd-peer"}; return p }(),
			cns: []string{"etcd-peer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := MemberTLSOf(peerCluster(tc.peer))
			if !equalStrings(mt.PeerAllowedHostnames, tc.hosts) || !equalStrings(mt.PeerAllowedCommonNames, tc.cns) {
				t.Errorf("hostnames %v, common names %v; want %v, %v", mt.PeerAllowedHostnames, mt.PeerAllowedCommonNames, tc.hosts, tc.cns)
			}
		})
	}
	// The name is one the cert-manager certificate covers.
	c := peerCluster(cmPeer())
	cert := &x509.Certificate{DNSNames: peerCertificate(c, "cluster.local", v1alpha2.IssuerReference{Name: "ca"}).DNSNames}
	if err := cert.VerifyHostname(PeerIdentityHostname(c)); err != nil {
		t.Errorf("the operator's peer certificate does not carry the identity it requires: %v", err)
	}
	other := peerCluster(cmPeer())
	other.Name = "other"
	if cert.VerifyHostname(PeerIdentityHostname(other)) == nil {
		t.Errorf("cluster c's peer certificate passes for cluster other")
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestPeerCertificateMismatch(t *testing.T) {
	ca, err := pki.NewCA("peer CA")
	if err != nil {
		t.Fatal(err)
	}
	secret := func(req pki.Request) *corev1.Secret {
		p, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Secret{Data: map[string][]byte{KeyCert: p.CertPEM, KeyKey: p.KeyPEM, KeyCA: ca.CertPEM()}}
	}
	ours := secret(pki.Request{CommonName: "c-peer", DNSNames: []string{"*.c.ns.svc"}})
	theirs := secret(pki.Request{CommonName: "other-peer", DNSNames: []string{"*.other.ns.svc"}})
	byHost := PeerSecretUse(MemberTLSOf(peerCluster(cmPeer())))
	byCN := SecretUse{Name: "peer", Purpose: "peer certificate", PeerCommonNames: []string{"c-peer"}}
	unrestricted := SecretUse{Name: "peer", Purpose: "peer certificate"}
	for _, tc := range []struct {
		name string
		use  SecretUse
		s    *corev1.Secret
		want string
	}{
		{"our certificate by hostname", byHost, ours, ""},
		{"another cluster's by hostname", byHost, theirs, "none of the names the members accept from a peer (peer.c.ns.svc); it names *.other.ns.svc"},
		{"our certificate by common name", byCN, ours, ""},
		{"another cluster's by common name", byCN, theirs, `common name "other-peer" is none of those`},
		{"no restriction", unrestricted, theirs, ""},
		{"not PEM", byHost, &corev1.Secret{Data: map[string][]byte{KeyCert: []byte("junk")}}, "holds no PEM certificate"},
		{"no certificate yet (MissingKey's to say)", byHost, &corev1.Secret{}, ""},
	} {
		got := tc.use.Mismatch(tc.s)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPeerIdentityContract holds the flags to what each etcd release the
// operator runs does with them: a member started with the peer flags
// tlsFlags writes accepts, on its peer port, a peer whose certificate
// carries the identity, and refuses one the same CA signed for another
// cluster and a client certificate without names; without the
// restriction it accepts them all (what the restriction is for).
func TestPeerIdentityContract(t *testing.T) {
	versions, err := tools.Pinned("ETCD_VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("peer CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(req pki.Request) pki.Pair {
		req.Server, req.Client = true, true
		p, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	member := issue(pki.Request{CommonName: "etcd-peer", DNSNames: []string{"*.c.ns.svc", "*.c.ns.svc.cluster.local"}, IPs: loopback})
	intruder := issue(pki.Request{CommonName: "intruder", DNSNames: []string{"*.other.ns.svc"}, IPs: loopback})
	root := issue(pki.Request{CommonName: "root"})
	restricted := cmPeer()
	byCN := cmPeer()
	byCN.AllowedCommonNames = []string{"etcd-peer"}
	for _, v := range strings.Fields(versions) {
		for _, tc := range []struct {
			name string
			peer *v1alpha2.PeerTLS
			// accepted says, for the member's, the intruder's and the
			// SAN-less certificate, whether the peer port takes it.
			accepted [3]bool
		}{
			{"by hostname", restricted, [3]bool{true, false, false}},
			{"by common name", byCN, [3]bool{true, false, false}},
			{"unrestricted", &v1alpha2.PeerTLS{SecretRef: ref("peer")}, [3]bool{true, true, true}},
		} {
			t.Run(v+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				m := &v1alpha2.EtcdMember{Spec: v1alpha2.EtcdMemberSpec{TLS: MemberTLSOf(peerCluster(tc.peer))}}
				peerURL := startPeerEtcd(t, v, tlsFlags(m), member, ca.CertPEM())
				for i, cert := range []pki.Pair{member, intruder, root} {
					checkPeer(t, peerURL, i, cert, ca.CertPEM(), tc.accepted[i])
				}
			})
		}
	}
}

// checkPeer dials the peer port with the i-th certificate (the member's,
// the intruder's, the SAN-less one) and checks it is accepted or refused.
func checkPeer(t *testing.T, peerURL string, i int, cert pki.Pair, caPEM []byte, accepted bool) {
	t.Helper()
	err := dialPeer(peerURL, cert, caPEM)
	if (err == nil) != accepted {
		t.Errorf("certificate %d (member, intruder, SAN-less): accepted %t, want %t (%v)", i, err == nil, accepted, err)
	}
	// The refusal is the handshake's, not an answer.
	if err != nil && !strings.Contains(err.Error(), "tls: ") {
		t.Errorf("certificate %d refused by other than TLS: %v", i, err)
	}
}

// startPeerEtcd runs a one-member etcd of the release with the given TLS
// flags, its peer directory holding the member's certificate, and returns
// its peer URL once it serves.
func startPeerEtcd(t *testing.T, version string, flags []string, member pki.Pair, caPEM []byte) string {
	t.Helper()
	dir, err := tools.EtcdDir(version)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	certs := filepath.Join(tmp, "peer")
	for name, data := range map[string][]byte{"tls.crt": member.CertPEM, "tls.key": member.KeyPEM, "ca.crt": caPEM} {
		if err := os.MkdirAll(certs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	peer, client := "https://"+freeLoopback(t), "http://"+freeLoopback(t)
	args := []string{"--name=m", "--data-dir=" + filepath.Join(tmp, "data"),
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=m=" + peer,
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client}
	for _, f := range flags {
		args = append(args, strings.ReplaceAll(f, PeerTLSDir, certs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "etcd"), args...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return peer
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd %s did not serve within 30s with %v: %v\n%s", version, args, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialPeer asks the peer port for its member list with a certificate.
func dialPeer(peerURL string, cert pki.Pair, caPEM []byte) error {
	pair, err := cert.TLS()
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(peerURL + "/members")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("peer port answered %s", resp.Status)
	}
	return nil
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
