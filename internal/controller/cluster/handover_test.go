package cluster

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The TLS hand-over, pass by pass, on a fake API server: the planner's
// restarts are carried out by the real re-templating (nextTemplate) and a
// Pod made again from the member, as the member controller would.

// pemOf is a PEM CERTIFICATE block with the given content: the hand-over
// moves CAs around without reading them.
func pemOf(s string) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte(s)})
}

func tlsSecret(name, ca string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Data: map[string][]byte{manifest.KeyCert: []byte("cert of " + name), manifest.KeyKey: []byte("key"), manifest.KeyCA: pemOf(ca)}}
}

// ownTLS is a cluster on its own Secrets, mutual TLS on both planes.
var ownTLS = &v1alpha2.EtcdClusterTLS{
	Client: &v1alpha2.ClientTLS{ServerSecretRef: &corev1.LocalObjectReference{Name: "own-server"},
		OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "own-operator"}},
	Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "own-peer"}},
}

// issuedTLS is the same cluster handed over to cert-manager.
var issuedTLS = &v1alpha2.EtcdClusterTLS{
	Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{ServerIssuerRef: v1alpha2.IssuerReference{Name: "ca"},
		OperatorClientIssuerRef: &v1alpha2.IssuerReference{Name: "ca"}}},
	Peer: &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: v1alpha2.IssuerReference{Name: "ca"}}},
}

// ownSecrets are the user's Secrets, of the old CA; issuedSecrets what
// cert-manager writes, of the new one.
func ownSecrets() []client.Object {
	return []client.Object{tlsSecret("own-server", "old-ca"), tlsSecret("own-peer", "old-ca"), tlsSecret("own-operator", "old-ca")}
}

func issuedSecrets() []client.Object {
	return []client.Object{tlsSecret("c-server-tls", "new-ca"), tlsSecret("c-peer-tls", "new-ca"), tlsSecret("c-operator-client-tls", "new-ca")}
}

// handoverWorld is a healthy three-member cluster made on its own
// Secrets whose spec now names cert-manager, with the members and Secrets
// on a fake API server.
func handoverWorld(t *testing.T, secrets ...client.Object) (*Reconciler, client.Client, *world) {
	t.Helper()
	w := healthyWorld(3, func(w *world) { w.cluster.Spec.TLS = ownTLS.DeepCopy() })
	for _, m := range w.members {
		m.Spec.TLS = manifest.MemberTLSOf(w.cluster)
		w.pods[m.Name] = podFor(w, m)
	}
	w.cluster.Status.OperatorClientSecret = "own-operator"
	w.cluster.Spec.TLS = issuedTLS.DeepCopy()
	w.original = w.cluster.DeepCopy()
	objs := append([]client.Object{w.cluster.DeepCopy()}, secrets...)
	for _, m := range w.members {
		objs = append(objs, m.DeepCopy())
	}
	r, c, _ := certTestReconciler(t, true, objs...)
	return r, c, w
}

var podSerial int

// podFor is the Pod the member controller makes for a member, Ready.
func podFor(w *world, m *v1alpha2.EtcdMember) *corev1.Pod {
	p := manifest.Pod(m, manifest.PodOptions{})
	podSerial++
	p.UID = types.UID(fmt.Sprintf("pod-%s-%d", m.Name, podSerial))
	// The member controller observes it.
	m.Status.PodUID = string(p.UID)
	p.Labels[manifest.LabelRole] = manifest.RoleVoter
	p.Status = corev1.PodStatus{PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if old := w.pods[m.Name]; old != nil {
		p.Status.PodIP = old.Status.PodIP
	}
	return p
}

// caOf says which CA signed the certificates of a Secret.
func caOf(secret string) string {
	if strings.HasPrefix(secret, "own-") {
		return "old-ca"
	}
	return "new-ca"
}

// trusts lists the CAs a Pod's etcd trusts on the peer plane, from its
// flags.
func trusts(p *corev1.Pod) []string {
	for _, v := range p.Spec.Volumes {
		if v.Name == "tls-trust" {
			return []string{"old-ca", "new-ca"}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == "tls-peer" {
			return []string{caOf(v.Secret.SecretName)}
		}
	}
	return nil
}

func presents(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.Name == "tls-peer" {
			return caOf(v.Secret.SecretName)
		}
	}
	return ""
}

// checkMutualTrust fails when two running members would refuse each
// other's peer certificates.
func checkMutualTrust(t *testing.T, w *world, step int) {
	t.Helper()
	for a, pa := range w.pods {
		for b, pb := range w.pods {
			if !slices.Contains(trusts(pa), presents(pb)) {
				t.Fatalf("step %d: member %s (trusting %v) would refuse member %s (presenting a certificate of %s)", step, a, trusts(pa), b, presents(pb))
			}
		}
	}
}

// pass runs what the cluster controller runs beside and in the planner,
// and carries out a restart the plan chose. It returns the plan.
func pass(t *testing.T, r *Reconciler, c client.Client, w *world) plan {
	t.Helper()
	ctx := context.Background()
	w.handover = handover{}
	w.features.foreignCertificates = nil
	if err := r.ensureTrust(ctx, w); err != nil {
		t.Fatal(err)
	}
	p := decide(w)
	if p.change != nil && p.change.kind == restart {
		m := p.change.member
		if !podOutdated(w, m) {
			if err := r.nextTemplate(ctx, w, m); err != nil {
				t.Fatal(err)
			}
		}
		if !podOutdated(w, m) {
			t.Fatalf("restart of %s chosen, but its Pod runs its spec: nothing would restart", m.Name)
		}
		// Evicted; the member controller makes the Pod again from the spec.
		w.pods[m.Name] = podFor(w, m)
	}
	setTLSHandover(w)
	return p
}

// TestTLSHandoverMovesEveryMemberWithoutDistrust walks a hand-over to its
// end: members first trust both CAs, then present the new certificates,
// then trust the new CA alone, one restart at a time; at no point do two
// members refuse each other; the condition says where it stands and ends
// Complete, and the trust Secret is gone.
func TestTLSHandoverMovesEveryMemberWithoutDistrust(t *testing.T) {
	r, c, w := handoverWorld(t, append(ownSecrets(), issuedSecrets()...)...)
	ctx := context.Background()
	var restarts []string
	sawRolling := false
	for step := range 20 {
		p := pass(t, r, c, w)
		checkMutualTrust(t, w, step)
		if step == 0 {
			checkTrustSecret(t, c)
		}
		if cond := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover); cond != nil && cond.Reason == conditions.ReasonRollingMembers {
			sawRolling = true
		}
		if p.change == nil {
			break
		}
		if p.change.kind != restart {
			t.Fatalf("step %d: change %v, want only restarts", step, p.change.kind)
		}
		restarts = append(restarts, p.change.member.Name)
	}
	if len(restarts) != 9 {
		t.Fatalf("restarts %v, want three per member", restarts)
	}
	for _, m := range w.members {
		if st := manifest.TLSStage(m, manifest.MemberTLSOf(w.cluster)); st != manifest.StageFinal {
			t.Errorf("member %s ends at stage %d", m.Name, st)
		}
		if m.Spec.TLS.TrustedCASecretRef != nil {
			t.Errorf("member %s still trusts the bundle", m.Name)
		}
	}
	if !sawRolling {
		t.Error("the condition never said RollingMembers")
	}
	cond := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover)
	if cond == nil || cond.Reason != conditions.ReasonHandoverComplete || cond.Status != metav1.ConditionFalse {
		t.Fatalf("condition %+v, want False/Complete", cond)
	}
	// The pass that found it complete dropped the trust Secret.
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-tls-handover"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the trust Secret is still there once the hand-over is complete (%v)", err)
	}
}

// checkTrustSecret: the trust Secret holds both CAs on both planes.
func checkTrustSecret(t *testing.T, c client.Client) {
	t.Helper()
	trust := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c-tls-handover"}, trust); err != nil {
		t.Fatalf("the trust Secret was not written before the first restart: %v", err)
	}
	for _, key := range []string{manifest.KeyClientCA, manifest.KeyPeerCA} {
		if !bytes.Contains(trust.Data[key], pemOf("old-ca")) || !bytes.Contains(trust.Data[key], pemOf("new-ca")) {
			t.Errorf("trust Secret's %s does not hold both CAs", key)
		}
	}
}

// TestTLSHandoverWaitsForTheNewMaterial: until cert-manager has written
// every key, no member is touched and no trust Secret is made; a Secret
// that exists without its keys is not ready.
func TestTLSHandoverWaitsForTheNewMaterial(t *testing.T) {
	empty := tlsSecret("c-peer-tls", "new-ca")
	delete(empty.Data, manifest.KeyCA)
	r, c, w := handoverWorld(t, append(ownSecrets(), tlsSecret("c-server-tls", "new-ca"), empty)...)
	p := pass(t, r, c, w)
	if p.change != nil {
		t.Fatalf("change %v %s while the new material is missing", p.change.kind, nameOf(p.change.member))
	}
	cond := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover)
	if cond == nil || cond.Reason != conditions.ReasonAwaitingMaterial || cond.Status != metav1.ConditionTrue {
		t.Fatalf("condition %+v, want True/AwaitingMaterial", cond)
	}
	for _, want := range []string{"c-operator-client-tls (not created yet)", "c-peer-tls (missing ca.crt)"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("condition says %q, want it to name %q", cond.Message, want)
		}
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c-tls-handover"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("trust Secret written before the new material was there (%v)", err)
	}
}

// TestTLSHandoverBlockedTouchesNoMember: a Certificate of the operator's
// name that is someone else's holds every member where it is.
func TestTLSHandoverBlockedTouchesNoMember(t *testing.T) {
	r, c, w := handoverWorld(t, append(ownSecrets(), issuedSecrets()...)...)
	ctx := context.Background()
	w.handover = handover{}
	w.features.foreignCertificates = []string{"Certificate c-server exists and is not controlled by this EtcdCluster"}
	if err := r.ensureTrust(ctx, w); err != nil {
		t.Fatal(err)
	}
	if p := decide(w); p.change != nil {
		t.Fatalf("change %v %s while blocked", p.change.kind, nameOf(p.change.member))
	}
	setTLSHandover(w)
	cond := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover)
	if cond == nil || cond.Reason != conditions.ReasonHandoverBlocked || !strings.Contains(cond.Message, "c-server") {
		t.Fatalf("condition %+v, want Blocked naming the Certificate", cond)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-tls-handover"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("trust Secret written while blocked (%v)", err)
	}
}

// TestTLSHandoverResumesAfterACrash: the operator stopped between moving a
// member's spec and evicting its Pod. The next pass restarts that member
// without moving its spec a second time.
func TestTLSHandoverResumesAfterACrash(t *testing.T) {
	r, c, w := handoverWorld(t, append(ownSecrets(), issuedSecrets()...)...)
	ctx := context.Background()
	w.handover = handover{}
	if err := r.ensureTrust(ctx, w); err != nil {
		t.Fatal(err)
	}
	p := decide(w)
	if p.change == nil || p.change.kind != restart {
		t.Fatalf("first pass chose %+v, want a restart", p.change)
	}
	m := p.change.member
	if err := r.nextTemplate(ctx, w, m); err != nil {
		t.Fatal(err)
	}
	moved := m.Spec.TLS.DeepCopy()
	// Crash: the Pod still runs the old material.
	p = pass(t, r, c, w)
	if p.change == nil || p.change.kind != restart || p.change.member.Name != m.Name {
		t.Fatalf("after the crash the pass chose %+v, want the restart of %s", p.change, m.Name)
	}
	if !equalTLS(m.Spec.TLS, moved) {
		t.Errorf("member %s moved again: %+v, want %+v", m.Name, m.Spec.TLS, moved)
	}
	if manifest.TLSStage(m, manifest.MemberTLSOf(w.cluster)) != manifest.StageTrusting {
		t.Errorf("member %s at stage %d, want trusting", m.Name, manifest.TLSStage(m, manifest.MemberTLSOf(w.cluster)))
	}
}

func equalTLS(a, b *v1alpha2.MemberTLS) bool { return manifest.TLSHash(a) == manifest.TLSHash(b) }

// TestNoHandoverWhereNothingMoved: what must never start a hand-over or
// restart anything: a cluster on its own Secrets that did not change; one
// made on cert-manager; members made before the peer identity existed
// (same Secrets, less in their TLS); Pods made before the TLS annotation.
func TestNoHandoverWhereNothingMoved(t *testing.T) {
	for name, c := range map[string]struct {
		spec *v1alpha2.EtcdClusterTLS
		// members changes the members before their Pods are made, pods
		// the Pods.
		members func(*v1alpha2.EtcdMember)
		pods    func(*corev1.Pod)
	}{
		"own Secrets, unchanged": {spec: ownTLS},
		"made on cert-manager":   {spec: issuedTLS},
		"members without the peer identity": {spec: issuedTLS,
			members: func(m *v1alpha2.EtcdMember) { m.Spec.TLS.PeerAllowedHostnames = nil }},
		"Pods without the TLS annotation": {spec: issuedTLS,
			pods: func(p *corev1.Pod) { delete(p.Annotations, manifest.AnnotationTLS) }},
	} {
		t.Run(name, func(t *testing.T) {
			w := healthyWorld(3, func(w *world) { w.cluster.Spec.TLS = c.spec.DeepCopy() })
			for _, m := range w.members {
				m.Spec.TLS = manifest.MemberTLSOf(w.cluster)
				if c.members != nil {
					c.members(m)
				}
				w.pods[m.Name] = podFor(w, m)
				if c.pods != nil {
					c.pods(w.pods[m.Name])
				}
			}
			r, cl, _ := certTestReconciler(t, true, append(ownSecrets(), issuedSecrets()...)...)
			checkNothingMoves(t, r, cl, w)
		})
	}
}

// checkNothingMoves: a pass restarts nothing, sets no TLSHandover and
// writes no trust Secret.
func checkNothingMoves(t *testing.T, r *Reconciler, c client.Client, w *world) {
	t.Helper()
	if p := pass(t, r, c, w); p.change != nil {
		t.Fatalf("change %v %s, want none", p.change.kind, nameOf(p.change.member))
	}
	if cond := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover); cond != nil {
		t.Errorf("condition %+v on a cluster that never moved", cond)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c-tls-handover"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("trust Secret written (%v)", err)
	}
}

// TestJoinerDuringAHandover: a member made while the hand-over runs is one
// stage on from those furthest behind, so it trusts and is trusted by
// every member, and a memory-backed member replaced for its step comes
// back further on.
func TestJoinerDuringAHandover(t *testing.T) {
	r, _, w := handoverWorld(t, append(ownSecrets(), issuedSecrets()...)...)
	w.handover = handover{}
	if err := r.ensureTrust(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	got := joinTLS(w)
	if got == nil || got.TrustedCASecretRef == nil || got.ClientServerSecretRef.Name != "own-server" {
		t.Fatalf("joiner TLS %+v, want the old Secrets trusting both CAs", got)
	}
	w.handover = handover{}
	w.cluster.Spec.TLS = ownTLS.DeepCopy()
	w.readHandover()
	if got := joinTLS(w); got != nil {
		t.Errorf("joiner TLS %+v with no hand-over, want the spec's (nil)", got)
	}
}

// A memory-backed member replaced for its step: while it leaves, its
// replacement joins one stage on from it, not from the members already
// further, which it would refuse.
func TestJoinerBesideALeavingMember(t *testing.T) {
	r, _, w := handoverWorld(t, append(ownSecrets(), issuedSecrets()...)...)
	final := manifest.MemberTLSOf(w.cluster)
	for _, m := range w.members[1:] {
		m.Spec.TLS = manifest.NextTLS(m, final, "c-tls-handover")
		w.pods[m.Name] = podFor(w, m)
	}
	deletedMember("m0")(w)
	w.handover = handover{}
	if err := r.ensureTrust(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	got := joinTLS(w)
	if got == nil || manifest.TLSStage(&v1alpha2.EtcdMember{Spec: v1alpha2.EtcdMemberSpec{TLS: got}}, final) != manifest.StageTrusting {
		t.Fatalf("joiner TLS %+v, want the trusting stage (the leaving m0 still runs on the old material)", got)
	}
}
