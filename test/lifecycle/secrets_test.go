package lifecycle

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Certificate material (issue 10): members wait for the Secrets they mount,
// and a change to one is rolled out one member at a time.

// withPeerTLS runs the cluster's peer plane from the Secret "peer-tls".
func withPeerTLS(c *v1alpha2.EtcdCluster) {
	c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "peer-tls"}}}
}

// putPeerSecret creates or replaces the peer Secret's data.
func (h *harness) putPeerSecret(data map[string]string) {
	h.t.Helper()
	b := map[string][]byte{}
	for k, v := range data {
		b[k] = []byte(v)
	}
	h.putSecret("peer-tls", b)
}

var peerMaterial = map[string]string{manifest.KeyCert: "cert 1", manifest.KeyKey: "key 1", manifest.KeyCA: "ca 1"}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for key, val := range m {
		if key != k {
			out[key] = val
		}
	}
	if v != "" {
		out[k] = v
	}
	return out
}

// A cluster whose peer Secret lacks its CA creates no Pod; its seed and the
// cluster name the Secret and the key; adding the key lets it form.
func TestMissingKeyIsNamedThenTheClusterForms(t *testing.T) {
	h := newHarness(t)
	h.putPeerSecret(with(peerMaterial, manifest.KeyCA, ""))
	h.createCluster("c", 3, withPeerTLS)
	h.steps(20)
	if pods := h.pods(); len(pods) != 0 {
		t.Fatalf("Pods %v were created without their CA", pods)
	}
	c := h.getCluster("c")
	for _, typ := range []string{conditions.Available, conditions.Progressing} {
		cond := conditions.Get(c.Status.Conditions, typ)
		if cond == nil || cond.Reason != conditions.ReasonSecretMissing || !strings.Contains(cond.Message, "peer-tls") || !strings.Contains(cond.Message, "ca.crt") {
			t.Errorf("%s: %+v", typ, cond)
		}
	}
	if notes := h.events.notes(conditions.ReasonSecretMissing); len(notes) == 0 || len(notes) > 2 {
		t.Errorf("SecretMissing events: %q (one per member and problem)", notes)
	}
	h.putPeerSecret(peerMaterial)
	h.run("3 once the CA is there", h.converged("c", 3))
}

// A rotated Secret restarts every member once, the leader last after
// handing over, keeping identities; status and Events record it. A Secret
// that then loses a key holds the next roll rather than restarting members
// that could not start again; putting the key back with the material the
// members run needs no restart at all.
func TestRotatedSecretRollsEveryMemberOnce(t *testing.T) {
	h := newHarness(t)
	h.putPeerSecret(peerMaterial)
	h.createCluster("c", 3, withPeerTLS)
	h.run("3", h.converged("c", 3))
	before := h.identities("c")
	leader := h.leaderName()

	h.putPeerSecret(with(peerMaterial, manifest.KeyCert, "cert 2"))
	h.runRoll("rotation", "c", 3)
	// The record completes once the last member settled.
	h.steps(10)
	for name, n := range h.incarnations() {
		if n != 2 {
			t.Errorf("member %s had %d Pods; a rotation restarts each once", name, n)
		}
	}
	if got := h.identities("c"); !mapsEqual(got, before) {
		t.Errorf("members changed identity: %v, was %v", got, before)
	}
	lr := h.getCluster("c").Status.LastRollOut
	if lr == nil || lr.Cause != v1alpha2.RollOutCauseSecrets || lr.CompletionTime == nil || len(lr.Restarted) != 3 || !strings.Contains(lr.Message, "peer-tls") {
		t.Fatalf("lastRollOut %+v", lr)
	}
	if lr.Restarted[2] != leader {
		t.Errorf("restarted %v; the leader %s goes last", lr.Restarted, leader)
	}
	if !slices.ContainsFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "move-leader ") }) {
		t.Errorf("the leader was restarted without handing over: %q", h.calls)
	}
	if notes := h.events.notes(conditions.ReasonRollingOut); !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "changed certificate material") }) {
		t.Errorf("no restart event names the material: %q", notes)
	}

	uids := h.podUIDs()
	h.putPeerSecret(with(peerMaterial, manifest.KeyCA, ""))
	h.steps(60)
	if got := h.podUIDs(); !slices.Equal(got, uids) {
		t.Errorf("members were restarted onto a Secret without its CA: %v, were %v", got, uids)
	}
	if p := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Progressing); p == nil || p.Reason != conditions.ReasonSecretMissing || !strings.Contains(p.Message, "ca.crt") {
		t.Errorf("Progressing %+v", p)
	}
	h.putPeerSecret(with(peerMaterial, manifest.KeyCert, "cert 2"))
	h.run("back to the running material", h.converged("c", 3))
	if got := h.podUIDs(); !slices.Equal(got, uids) {
		t.Errorf("members were restarted for material they already run: %v, were %v", got, uids)
	}
}

// leaderName is the member etcd's leader belongs to.
func (h *harness) leaderName() string {
	for _, m := range h.members("c") {
		if id, _ := etcd.ParseID(m.Status.MemberID); id == h.etcd.Leader() {
			return m.Name
		}
	}
	return ""
}

// putSecret creates or replaces a Secret's data.
func (h *harness) putSecret(name string, data map[string][]byte) {
	h.t.Helper()
	h.putSecretObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data})
}

// putSecretObject creates or replaces a Secret.
func (h *harness) putSecretObject(s *corev1.Secret) {
	h.t.Helper()
	err := h.raw.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{})
	if err == nil {
		err = h.raw.Update(context.Background(), s)
	} else {
		err = h.raw.Create(context.Background(), s)
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

// issuedPeerMaterial is what cert-manager would write into the peer Secret
// of cluster c: a certificate valid for the identity the members then
// require of a peer (the fake etcd checks no handshake, the operator
// checks the name).
func issuedPeerMaterial(t *testing.T) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "c-peer"}, DNSNames: []string{"*.c." + ns + ".svc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return map[string][]byte{manifest.KeyCert: crt, manifest.KeyKey: []byte("key 2"), manifest.KeyCA: crt}
}

// handOverPeer moves cluster c's peer plane to cert-manager, with the
// Secret cert-manager would write already there.
func handOverPeer(h *harness) {
	h.putSecret("c-peer-tls", issuedPeerMaterial(h.t))
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) {
		s.TLS.Peer = &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: v1alpha2.IssuerReference{Name: "ca"}}}
	})
}

// handedOver: every member of c runs the issued peer Secret alone, and the
// condition says so.
func handedOver(h *harness) bool {
	for _, m := range h.members("c") {
		if t := m.Spec.TLS; t == nil || t.PeerSecretRef == nil || t.PeerSecretRef.Name != "c-peer-tls" || t.TrustedCASecretRef != nil {
			return false
		}
	}
	c := conditions.Get(h.getCluster("c").Status.Conditions, conditions.TLSHandover)
	return c != nil && c.Reason == conditions.ReasonHandoverComplete
}

// restartedThrice: a hand-over resumed without restarting a member more
// than its three steps.
func restartedThrice(h *harness) {
	for name, n := range h.incarnations() {
		if n > 4 {
			h.t.Errorf("member %s was started %d times in a hand-over of three restarts each", name, n)
		}
	}
}
