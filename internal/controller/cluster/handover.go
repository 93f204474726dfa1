package cluster

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The TLS hand-over (see manifest.TLSStage): a cluster whose spec.tls moved
// from the user's own Secrets to cert-manager brings its members to the new
// material without downtime. ensureTrust, beside the planner, waits for
// cert-manager's Secrets and writes the trust Secret that holds the CAs of
// both sides; the roll-out (roll.go) then moves the members one restart at
// a time, every member one stage on before any goes further; report sets
// the TLSHandover condition from what the members run.

// awaitingMaterialPoll is how often a hand-over waiting for cert-manager's
// Secrets looks again.
const awaitingMaterialPoll = 10 * time.Second

// handover is what the pass knows of a TLS hand-over.
type handover struct {
	// final is the members' TLS the spec asks for.
	final *v1alpha2.MemberTLS
	// minStage is the lowest stage of a member that runs or stays.
	minStage int
	// active: such a member is not at the final stage, or its Pod does
	// not run its TLS yet.
	active bool
	// awaiting says which of the new material is not there yet.
	awaiting string
	// blocked says why the hand-over cannot go on (a Certificate that is
	// someone else's).
	blocked string
	// trustReady: the trust Secret holds the CAs of both sides; no member
	// moves before.
	trustReady bool
}

// handoverMembers are the members a hand-over must account for: those
// that stay, dormant ones included, and those leaving whose Pod still
// runs (a member joining meanwhile must trust them and be trusted by
// them until they are gone).
func (w *world) handoverMembers() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) || w.pods[m.Name] != nil })
}

// readHandover works out, from the members alone, whether a hand-over runs
// and how far it got.
func (w *world) readHandover() {
	h := &w.handover
	h.final = manifest.MemberTLSOf(w.cluster)
	h.minStage = manifest.StageFinal
	for _, m := range w.handoverMembers() {
		st := manifest.TLSStage(m, h.final)
		h.minStage = min(h.minStage, st)
		if st != manifest.StageFinal || !w.podTLSCurrent(m) {
			h.active = true
		}
	}
}

// podTLSCurrent reports whether the member's Pod runs its TLS; a member
// without a Pod runs nothing, and its next Pod is made from its spec.
func (w *world) podTLSCurrent(m *v1alpha2.EtcdMember) bool {
	p := w.pods[m.Name]
	return p == nil || manifest.PodTLSCurrent(p, m)
}

// tlsWaits reports whether a member that is not at the final stage must
// wait before its next hand-over step: the trust Secret is not ready, or
// another member is a stage behind.
func (w *world) tlsWaits(m *v1alpha2.EtcdMember) bool {
	h := w.handover
	st := manifest.TLSStage(m, h.final)
	return st != manifest.StageFinal && (!h.trustReady || st > h.minStage)
}

// handoverPending reports whether the member's next restart is a hand-over
// step it may take now.
func (w *world) handoverPending(m *v1alpha2.EtcdMember) bool {
	return manifest.TLSStage(m, w.handover.final) != manifest.StageFinal && !w.tlsWaits(m)
}

// ensureTrust prepares a hand-over: it waits for the new material, then
// writes the trust Secret, which only ever grows (a member never loses a
// CA it trusted while the hand-over runs). Once every member runs the
// final material, the trust Secret goes.
func (r *Reconciler) ensureTrust(ctx context.Context, w *world) error {
	w.readHandover()
	h := &w.handover
	if !h.active {
		return r.dropTrust(ctx, w)
	}
	if len(w.features.foreignCertificates) > 0 {
		h.blocked = strings.Join(w.features.foreignCertificates, "; ")
		return nil
	}
	missing, err := r.newMaterialMissing(ctx, w)
	if err != nil || len(missing) > 0 {
		h.awaiting = strings.Join(missing, "; ")
		return err
	}
	return r.writeTrust(ctx, w)
}

// newMaterialMissing lists the Secrets of the final material that do not
// hold what the members and the operator need yet.
func (r *Reconciler) newMaterialMissing(ctx context.Context, w *world) ([]string, error) {
	f := w.handover.final
	want := map[string][]string{}
	if f.ClientServerSecretRef != nil {
		// ca.crt also when clients need no certificate: the operator
		// verifies the members' certificates with it.
		want[f.ClientServerSecretRef.Name] = []string{manifest.KeyCert, manifest.KeyKey, manifest.KeyCA}
	}
	if f.PeerSecretRef != nil {
		want[f.PeerSecretRef.Name] = []string{manifest.KeyCert, manifest.KeyKey, manifest.KeyCA}
	}
	if name := etcdconn.OperatorClientSecret(w.cluster); name != "" {
		want[name] = append(want[name], manifest.KeyCert, manifest.KeyKey)
	}
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		sec, err := r.readSecret(ctx, w.cluster.Namespace, name)
		if err != nil {
			return nil, err
		}
		if sec == nil {
			missing = append(missing, name+" (not created yet)")
			continue
		}
		var lacks []string
		for _, k := range want[name] {
			if len(sec.Data[k]) == 0 && !slices.Contains(lacks, k) {
				lacks = append(lacks, k)
			}
		}
		if len(lacks) > 0 {
			missing = append(missing, fmt.Sprintf("%s (missing %s)", name, strings.Join(lacks, ", ")))
		}
	}
	return missing, nil
}

// writeTrust creates or completes the trust Secret: the CAs of every
// Secret a member that has not switched yet mounts, and the final
// Secrets' CAs, per plane.
func (r *Reconciler) writeTrust(ctx context.Context, w *world) error {
	name := manifest.HandoverSecretName(w.cluster.Name)
	have, err := r.readSecret(ctx, w.cluster.Namespace, name)
	if err != nil {
		return err
	}
	if have != nil && !metav1.IsControlledBy(have, w.cluster) {
		w.handover.blocked = fmt.Sprintf("Secret %s exists and is not controlled by this EtcdCluster: the hand-over keeps the CAs of both sides there. "+
			"Delete or rename it", name)
		return nil
	}
	client, peer, err := r.trustBundles(ctx, w, have)
	if err != nil {
		return err
	}
	if have != nil && bytes.Equal(have.Data[manifest.KeyClientCA], client) && bytes.Equal(have.Data[manifest.KeyPeerCA], peer) {
		w.handover.trustReady = true
		return nil
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.cluster.Namespace, Labels: manifest.ClusterLabels(w.cluster.Name),
			OwnerReferences: []metav1.OwnerReference{manifest.ClusterOwner(w.cluster)}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{},
	}
	if len(client) > 0 {
		sec.Data[manifest.KeyClientCA] = client
	}
	if len(peer) > 0 {
		sec.Data[manifest.KeyPeerCA] = peer
	}
	if have == nil {
		err = r.Client.Create(ctx, sec)
	} else {
		have = have.DeepCopy()
		have.Data = sec.Data
		err = r.Client.Update(ctx, have)
	}
	if err != nil {
		return fmt.Errorf("writing the TLS hand-over's trust Secret %s: %w", name, err)
	}
	logf(ctx, w)("Wrote the CAs of the old and the new TLS material, which members trust during the hand-over", "secret", name)
	w.handover.trustReady = true
	return nil
}

// trustBundles are the CA bundles the trust Secret is to hold: what it
// holds, then the CAs of the Secrets members mount that are not final,
// then the final ones.
func (r *Reconciler) trustBundles(ctx context.Context, w *world, have *corev1.Secret) (client, peer []byte, err error) {
	var oldClient, oldPeer []string
	for _, m := range w.handoverMembers() {
		t := m.Spec.TLS
		if t == nil {
			continue
		}
		if t.ClientServerSecretRef != nil && !slices.Contains(oldClient, t.ClientServerSecretRef.Name) {
			oldClient = append(oldClient, t.ClientServerSecretRef.Name)
		}
		if t.PeerSecretRef != nil && !slices.Contains(oldPeer, t.PeerSecretRef.Name) {
			oldPeer = append(oldPeer, t.PeerSecretRef.Name)
		}
	}
	f := w.handover.final
	if f.ClientServerSecretRef != nil {
		if client, err = r.bundle(ctx, w, have, manifest.KeyClientCA, oldClient, f.ClientServerSecretRef.Name); err != nil {
			return nil, nil, err
		}
	}
	if f.PeerSecretRef != nil {
		if peer, err = r.bundle(ctx, w, have, manifest.KeyPeerCA, oldPeer, f.PeerSecretRef.Name); err != nil {
			return nil, nil, err
		}
	}
	return client, peer, nil
}

// bundle merges the ca.crt of the old Secrets and then the final one into
// what the trust Secret holds under key.
func (r *Reconciler) bundle(ctx context.Context, w *world, have *corev1.Secret, key string, old []string, final string) ([]byte, error) {
	var held []byte
	if have != nil {
		held = have.Data[key]
	}
	var cas [][]byte
	for _, name := range append(slices.DeleteFunc(slices.Clone(old), func(n string) bool { return n == final }), final) {
		sec, err := r.readSecret(ctx, w.cluster.Namespace, name)
		if err != nil {
			return nil, err
		}
		if sec != nil {
			cas = append(cas, sec.Data[manifest.KeyCA])
		}
	}
	return manifest.MergeCAs(held, cas...), nil
}

// dropTrust deletes the trust Secret once the hand-over is complete: only
// while the condition still says it runs, so a cluster at rest asks
// nothing.
func (r *Reconciler) dropTrust(ctx context.Context, w *world) error {
	c := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: manifest.HandoverSecretName(w.cluster.Name), Namespace: w.cluster.Namespace}}
	if err := r.Client.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the TLS hand-over's trust Secret: %w", err)
	}
	return nil
}

// setTLSHandover sets the TLSHandover condition from the hand-over: only
// on a cluster that ever moved (a cluster made on cert-manager never gets
// it).
func setTLSHandover(w *world) {
	h := w.handover
	had := conditions.Get(w.cluster.Status.Conditions, conditions.TLSHandover) != nil
	switch {
	case h.final == nil || (!h.active && !had):
		return
	case !h.active:
		set(w, conditions.TLSHandover, false, conditions.ReasonHandoverComplete,
			"Every member runs the TLS material spec.tls names, and trusts its CA alone")
	case h.blocked != "":
		set(w, conditions.TLSHandover, false, conditions.ReasonHandoverBlocked, h.blocked+". No member is moved meanwhile")
	case h.awaiting != "":
		set(w, conditions.TLSHandover, true, conditions.ReasonAwaitingMaterial,
			"Waiting for cert-manager to write "+h.awaiting+"; no member is moved before. Look at the Certificates and their CertificateRequests")
	default:
		set(w, conditions.TLSHandover, true, conditions.ReasonRollingMembers, rollingMessage(w))
	}
}

// rollingMessage counts the members at each stage.
func rollingMessage(w *world) string {
	var names [manifest.StageFinal + 1][]string
	for _, m := range w.handoverMembers() {
		st := manifest.TLSStage(m, w.handover.final)
		if st == manifest.StageFinal && !w.podTLSCurrent(m) {
			// Its Pod still trusts both CAs.
			st = manifest.StageSwitched
		}
		names[st] = append(names[st], m.Name)
	}
	stages := []string{"on the old material", "trusting both CAs", "presenting the new certificates", "on the new material alone"}
	var parts []string
	for st, ns := range names {
		if len(ns) > 0 {
			slices.Sort(ns)
			parts = append(parts, fmt.Sprintf("%d %s (%s)", len(ns), stages[st], strings.Join(ns, ", ")))
		}
	}
	return "Moving the members to the TLS material spec.tls names, one restart at a time: " + strings.Join(parts, "; ")
}

// handoverStep describes the hand-over step a member's restart makes, for
// its Event and status.lastRollOut.
func handoverStep(m *v1alpha2.EtcdMember, final *v1alpha2.MemberTLS) string {
	switch manifest.TLSStage(m, final) {
	case manifest.StageTrusting:
		return "to trust the CAs of both the old and the new TLS material"
	case manifest.StageSwitched:
		return "to present the new TLS certificates"
	}
	return "to trust the new TLS material's CA alone"
}

// joinTLS is the TLS of a member that joins during a hand-over, nil when
// none runs: one stage on from the members furthest behind (they and the
// others trust it, and it trusts them: members one stage apart do), so
// that a memory-backed member replaced for its next step comes back
// further on; before the trust Secret is ready, theirs.
func joinTLS(w *world) *v1alpha2.MemberTLS {
	h := w.handover
	if !h.active {
		return nil
	}
	for _, m := range w.handoverMembers() {
		if manifest.TLSStage(m, h.final) != h.minStage || m.Spec.TLS == nil {
			continue
		}
		if !h.trustReady {
			return m.Spec.TLS.DeepCopy()
		}
		return manifest.NextTLS(m, h.final, manifest.HandoverSecretName(w.cluster.Name))
	}
	return nil
}

// nextStageOf is the member as its next hand-over step makes it.
func nextStageOf(w *world, m *v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	next := m.DeepCopy()
	next.Spec.TLS = manifest.NextTLS(m, w.handover.final, manifest.HandoverSecretName(w.cluster.Name))
	return next
}
