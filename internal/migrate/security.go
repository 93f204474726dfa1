package migrate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The legacy operator keeps certificates and the CAs that check them in
// separate Secrets (spec.security.tls.*TrustedCASecret); the new API reads a
// member's CAs from ca.crt of its certificate's own Secret. The tool reads
// every Secret the legacy spec names, checks that the certificates verify
// for the names the operator dials, and plans the CAs each certificate
// Secret's ca.crt must gain.

// material is a legacy cluster's certificate material as its Secrets hold it.
type material struct {
	spec    legacyTLS
	secrets map[string]*corev1.Secret
	// serverRoots are the CAs (from any legacy CA Secret or ca.crt of the
	// server Secret) that verify the server certificate.
	serverRoots []*x509.Certificate
	// clientCAs verify client certificates (clientTrustedCASecret).
	clientCAs []*x509.Certificate
	// peerCAs verify peer certificates (peerTrustedCASecret, else ca.crt of
	// the peer Secret).
	peerCAs []*x509.Certificate
	// operatorCert is the legacy operator's client certificate (clientSecret).
	operatorCert *tls.Certificate
}

// caChange is a CA that ca.crt of a certificate Secret gains.
type caChange struct {
	Secret string
	CA     *x509.Certificate
	// What says what the CA is and where the legacy cluster keeps it.
	What string
}

func (c caChange) String() string {
	return fmt.Sprintf("Secret %s: ca.crt gains the CA %q (%s)", c.Secret, c.CA.Subject.String(), c.What)
}

// clientTLSOn says whether the legacy members serve their client port over TLS.
func (l *Legacy) clientTLSOn() bool { return l.tls().ServerSecret != "" }

// peerSecretOn says whether the legacy members use a peer certificate of
// their own (rather than --peer-auto-tls).
func (l *Legacy) peerSecretOn() bool { return l.tls().PeerSecret != "" }

func (l *Legacy) tls() legacyTLS {
	if l.Spec.Security == nil {
		return legacyTLS{}
	}
	return l.Spec.Security.TLS
}

// readTLS reads every Secret the legacy spec names and the CAs and key
// pairs in them. Problems refuse the cluster.
func (lv *Live) readTLS(ctx context.Context, c client.Client) error {
	spec := lv.Legacy.tls()
	if spec == (legacyTLS{}) {
		return nil
	}
	m := &material{spec: spec, secrets: map[string]*corev1.Secret{}}
	problems := len(lv.Problems)
	for _, ref := range []struct{ field, name string }{
		{"peerTrustedCASecret", spec.PeerTrustedCASecret}, {"peerSecret", spec.PeerSecret},
		{"serverTrustedCASecret", spec.ServerTrustedCASecret}, {"serverSecret", spec.ServerSecret},
		{"clientTrustedCASecret", spec.ClientTrustedCASecret}, {"clientSecret", spec.ClientSecret},
	} {
		if ref.name == "" || m.secrets[ref.name] != nil {
			continue
		}
		s := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: lv.Legacy.Namespace(), Name: ref.name}, s)
		switch {
		case apierrors.IsNotFound(err):
			lv.refuse("Secret %s (spec.security.tls.%s) does not exist", ref.name, ref.field)
			continue
		case err != nil:
			return err
		}
		m.secrets[ref.name] = s
	}
	if len(lv.Problems) > problems {
		return nil
	}
	lv.TLS = m
	if spec.ServerSecret != "" {
		lv.checkServer(m)
	}
	if spec.ClientTrustedCASecret != "" {
		m.clientCAs = lv.cas(m, spec.ClientTrustedCASecret, "spec.security.tls.clientTrustedCASecret", manifest.KeyCA)
		if len(m.clientCAs) == 0 {
			lv.refuse("Secret %s (spec.security.tls.clientTrustedCASecret) has no CA certificate in ca.crt", spec.ClientTrustedCASecret)
		}
	}
	if spec.ClientSecret != "" {
		lv.checkOperatorCert(m)
	}
	if spec.PeerSecret != "" {
		lv.checkPeer(m)
	}
	return nil
}

// cas reads the CA certificates under the given keys of a Secret.
func (lv *Live) cas(m *material, secret, field string, keys ...string) []*x509.Certificate {
	var out []*x509.Certificate
	for _, k := range keys {
		certs, err := parseCerts(m.secrets[secret].Data[k])
		if err != nil {
			lv.refuse("Secret %s (%s), key %s: %v", secret, field, k, err)
			continue
		}
		for _, c := range certs {
			if !containsCert(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// checkServer finds the CAs that verify the server certificate for every
// member's client URL, which the operator dials and verifies.
func (lv *Live) checkServer(m *material) {
	spec := m.spec
	leaf, chain, ok := lv.keyPair(m, spec.ServerSecret, "spec.security.tls.serverSecret")
	if !ok {
		return
	}
	var candidates []*x509.Certificate
	for _, c := range lv.cas(m, spec.ServerSecret, "spec.security.tls.serverSecret", manifest.KeyCA) {
		candidates = appendCert(candidates, c)
	}
	if spec.ServerTrustedCASecret != "" {
		// The legacy operator read this CA from tls.crt; ca.crt is the usual key.
		for _, c := range lv.cas(m, spec.ServerTrustedCASecret, "spec.security.tls.serverTrustedCASecret", manifest.KeyCA, manifest.KeyCert) {
			candidates = appendCert(candidates, c)
		}
	}
	if spec.ClientTrustedCASecret != "" {
		for _, c := range lv.cas(m, spec.ClientTrustedCASecret, "spec.security.tls.clientTrustedCASecret", manifest.KeyCA) {
			candidates = appendCert(candidates, c)
		}
	}
	for _, ca := range candidates {
		if verify(leaf, chain, []*x509.Certificate{ca}, "", x509.ExtKeyUsageServerAuth) == nil {
			m.serverRoots = append(m.serverRoots, ca)
		}
	}
	if len(m.serverRoots) == 0 {
		lv.refuse("the server certificate in Secret %s is signed by no CA the legacy Secrets hold (ca.crt of %s, serverTrustedCASecret, clientTrustedCASecret): put its CA into ca.crt of %s so the operator can verify the members", spec.ServerSecret, spec.ServerSecret, spec.ServerSecret)
		return
	}
	for _, p := range lv.Pods {
		host := lv.memberHost(p.Name)
		if err := verify(leaf, chain, m.serverRoots, host, x509.ExtKeyUsageServerAuth); err != nil {
			lv.refuse("the server certificate in Secret %s does not serve %s, which the operator dials: %v", spec.ServerSecret, host, err)
		}
	}
}

// checkOperatorCert checks the legacy operator's client certificate, which
// the tool and then the operator present to etcd.
func (lv *Live) checkOperatorCert(m *material) {
	spec := m.spec
	if spec.ClientTrustedCASecret == "" {
		// Without a client CA etcd asks for no certificate; the operator
		// presents none.
		return
	}
	leaf, chain, ok := lv.keyPair(m, spec.ClientSecret, "spec.security.tls.clientSecret")
	if !ok {
		return
	}
	pair, err := tls.X509KeyPair(m.secrets[spec.ClientSecret].Data[manifest.KeyCert], m.secrets[spec.ClientSecret].Data[manifest.KeyKey])
	if err != nil {
		lv.refuse("Secret %s (spec.security.tls.clientSecret): %v", spec.ClientSecret, err)
		return
	}
	m.operatorCert = &pair
	if len(m.clientCAs) > 0 {
		if err := verify(leaf, chain, m.clientCAs, "", x509.ExtKeyUsageClientAuth); err != nil {
			lv.refuse("the client certificate in Secret %s is not accepted by the CA in %s: %v", spec.ClientSecret, spec.ClientTrustedCASecret, err)
		}
	}
}

// checkPeer reads the peer CA and checks the peer certificate for the
// members' peer URLs.
func (lv *Live) checkPeer(m *material) {
	spec := m.spec
	leaf, chain, ok := lv.keyPair(m, spec.PeerSecret, "spec.security.tls.peerSecret")
	if !ok {
		return
	}
	if spec.PeerTrustedCASecret != "" {
		m.peerCAs = lv.cas(m, spec.PeerTrustedCASecret, "spec.security.tls.peerTrustedCASecret", manifest.KeyCA)
	} else {
		m.peerCAs = lv.cas(m, spec.PeerSecret, "spec.security.tls.peerSecret", manifest.KeyCA)
	}
	if len(m.peerCAs) == 0 {
		lv.refuse("no peer CA: neither spec.security.tls.peerTrustedCASecret nor ca.crt of Secret %s holds one", spec.PeerSecret)
		return
	}
	for _, p := range lv.Pods {
		host := lv.memberHost(p.Name)
		if err := verify(leaf, chain, m.peerCAs, host, x509.ExtKeyUsageServerAuth); err != nil {
			lv.refuse("the peer certificate in Secret %s does not serve %s, the peer URL of a member: %v", spec.PeerSecret, host, err)
		}
	}
}

// keyPair parses tls.crt and tls.key of a Secret: the leaf, the rest of the
// chain, and whether both are usable.
func (lv *Live) keyPair(m *material, secret, field string) (*x509.Certificate, []*x509.Certificate, bool) {
	s := m.secrets[secret]
	certs, err := parseCerts(s.Data[manifest.KeyCert])
	if err == nil && len(certs) == 0 {
		err = errors.New("no certificate")
	}
	if err != nil {
		lv.refuse("Secret %s (%s), tls.crt: %v", secret, field, err)
		return nil, nil, false
	}
	if _, err := tls.X509KeyPair(s.Data[manifest.KeyCert], s.Data[manifest.KeyKey]); err != nil {
		lv.refuse("Secret %s (%s): tls.crt and tls.key are not a key pair: %v", secret, field, err)
		return nil, nil, false
	}
	return certs[0], certs[1:], true
}

// memberHost is the DNS name of an adopted member.
func (lv *Live) memberHost(member string) string {
	return fmt.Sprintf("%s.%s.%s.svc", member, lv.Legacy.HeadlessService(), lv.Legacy.Namespace())
}

// clientTLS is the TLS the tool dials a legacy member's client port with,
// or nil when it is plain.
func (lv *Live) clientTLS() *tls.Config {
	m := lv.TLS
	if m == nil || !lv.Legacy.clientTLSOn() {
		return nil
	}
	pool := x509.NewCertPool()
	for _, ca := range m.serverRoots {
		pool.AddCert(ca)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if m.operatorCert != nil {
		cfg.Certificates = []tls.Certificate{*m.operatorCert}
	}
	return cfg
}

// caChanges are the CAs the server and peer Secrets' ca.crt must hold for
// the new API and do not yet: the server Secret's must verify the server
// certificate (the operator reads it so) and, with client certificate
// auth, the clients (members the operator starts take their
// --trusted-ca-file from it); the peer Secret's must verify peers.
func (lv *Live) caChanges() []caChange {
	m := lv.TLS
	if m == nil {
		return nil
	}
	want := map[string][]caChange{}
	add := func(secret string, cas []*x509.Certificate, what string) {
		if secret == "" {
			return
		}
		for _, ca := range cas {
			if !slices.ContainsFunc(want[secret], func(c caChange) bool { return c.CA.Equal(ca) }) {
				want[secret] = append(want[secret], caChange{Secret: secret, CA: ca, What: what})
			}
		}
	}
	spec := m.spec
	add(spec.ServerSecret, m.serverRoots, "the CA of the server certificate, which the operator verifies members with")
	add(spec.ServerSecret, m.clientCAs, "the client CA, from spec.security.tls.clientTrustedCASecret "+spec.ClientTrustedCASecret)
	add(spec.PeerSecret, m.peerCAs, "the peer CA, from spec.security.tls.peerTrustedCASecret "+spec.PeerTrustedCASecret)
	var out []caChange
	for _, secret := range sortedKeys(want) {
		have, _ := parseCerts(m.secrets[secret].Data[manifest.KeyCA])
		for _, c := range want[secret] {
			if !containsCert(have, c.CA) {
				out = append(out, c)
			}
		}
	}
	return out
}

// tlsRisks are what the adoption changes or cannot vouch for about the
// certificates.
func (lv *Live) tlsRisks() []string {
	m := lv.TLS
	if m == nil {
		return nil
	}
	l := lv.Legacy
	var out []string
	// A name the operator would give a member it adds.
	probe := fmt.Sprintf("%s-x7k2q.%s.%s.svc", l.Name(), l.Name(), l.Namespace())
	wildcard := fmt.Sprintf("*.%s.%s.svc", l.Name(), l.Namespace())
	if s := m.spec.ServerSecret; s != "" && len(m.serverRoots) > 0 {
		if leaf, chain, err := leafOf(m.secrets[s]); err == nil && verify(leaf, chain, m.serverRoots, probe, x509.ExtKeyUsageServerAuth) != nil {
			out = append(out, fmt.Sprintf("CERTIFICATES: the server certificate in Secret %s does not name %s: members the operator adds (scaling up, replacing a member) live under the Service %s and will not serve a client that verifies their name; the operator cannot reach them either. Re-issue it with that name before scaling up", s, wildcard, l.Name()))
		}
		if leaf, chain, err := leafOf(m.secrets[s]); err == nil && verify(leaf, chain, m.serverRoots, manifest.ClientServiceName(l.Name())+"."+l.Namespace()+".svc", x509.ExtKeyUsageServerAuth) != nil {
			out = append(out, fmt.Sprintf("the server certificate in Secret %s does not name the client Service %s.%s.svc: clients that move to it and verify names will refuse it", s, manifest.ClientServiceName(l.Name()), l.Namespace()))
		}
	}
	if s := m.spec.PeerSecret; s != "" && len(m.peerCAs) > 0 {
		if leaf, chain, err := leafOf(m.secrets[s]); err == nil && verify(leaf, chain, m.peerCAs, probe, x509.ExtKeyUsageServerAuth) != nil {
			out = append(out, fmt.Sprintf("CERTIFICATES: the peer certificate in Secret %s does not name %s: a member the operator adds could not join (its peers verify its name). Re-issue it with that name before scaling up", s, wildcard))
		}
	}
	if changes := lv.caChanges(); len(changes) > 0 {
		secrets := map[string]bool{}
		for _, c := range changes {
			secrets[c.Secret] = true
		}
		out = append(out, fmt.Sprintf("the tool adds CA certificates to ca.crt of Secret %s (listed above); whatever renews these Secrets must keep them, or members the operator restarts stop trusting their peers or clients", strings.Join(sortedKeys(secrets), ", ")))
	}
	if s := m.spec.ServerSecret; s != "" && len(m.clientCAs) > 0 && !sameCerts(m.serverRoots, m.clientCAs) {
		out = append(out, fmt.Sprintf("the server certificate's CA and the client CA differ: members the operator starts trust client certificates of every CA in ca.crt of %s, so certificates of the server's CA become valid client certificates too", s))
	}
	return out
}

func leafOf(s *corev1.Secret) (*x509.Certificate, []*x509.Certificate, error) {
	certs, err := parseCerts(s.Data[manifest.KeyCert])
	if err != nil {
		return nil, nil, err
	}
	if len(certs) == 0 {
		return nil, nil, errors.New("no certificate in tls.crt")
	}
	return certs[0], certs[1:], nil
}

// verify checks a certificate against roots, for a host name when one is given.
func verify(leaf *x509.Certificate, chain, roots []*x509.Certificate, host string, usage x509.ExtKeyUsage) error {
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range roots {
		pool.AddCert(c)
	}
	for _, c := range chain {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// parseCerts reads every certificate of a PEM bundle.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 && len(out) == 0 {
				return nil, fmt.Errorf("not PEM")
			}
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

func containsCert(list []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(list, c.Equal)
}

func appendCert(list []*x509.Certificate, c *x509.Certificate) []*x509.Certificate {
	if containsCert(list, c) {
		return list
	}
	return append(list, c)
}

func sameCerts(a, b []*x509.Certificate) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		if !containsCert(b, c) {
			return false
		}
	}
	return true
}

// withCAs is a ca.crt bundle with the given CAs appended unless present.
func withCAs(have []byte, cas []*x509.Certificate) []byte {
	certs, _ := parseCerts(have)
	out := append([]byte(nil), bytes.TrimRight(have, "\n")...)
	if len(out) > 0 {
		out = append(out, '\n')
	}
	for _, ca := range cas {
		if containsCert(certs, ca) {
			continue
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
		certs = append(certs, ca)
	}
	return out
}
