package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"

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
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "peer-tls"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
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
