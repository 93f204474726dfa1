package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// The TLS hand-over moves a cluster's planes from the user's own Secrets to
// the ones cert-manager writes, whose certificates another CA signs. Members
// that trusted only the old CA would refuse those that present the new
// certificates, so every member goes through three restarts, each rolled
// across the cluster before the next begins:
//
//  1. trusting: its old certificates, trusting the old and the new CA (from
//     the trust Secret, HandoverSecretName);
//  2. switched: the new certificates, still trusting both;
//  3. final: the new certificates, trusting the new CA alone.
//
// Any two members one step apart trust each other's certificates.

// Stages of a member in a TLS hand-over.
const (
	StageOld = iota
	StageTrusting
	StageSwitched
	StageFinal
)

// Keys of the trust Secret: the CA bundles members trust on each plane
// during a hand-over.
const (
	KeyClientCA = "client-ca.crt"
	KeyPeerCA   = "peer-ca.crt"
)

// AnnotationPreviousOperatorClient on the trust Secret names the Secret of
// the operator's client certificate before the hand-over: the operator
// offers both until the hand-over completes.
const AnnotationPreviousOperatorClient = Prefix + "previous-operator-client"

// AnnotationTLS on a member Pod is a hash of the member's TLS the Pod was
// made from (see PodTLSCurrent).
const AnnotationTLS = Prefix + "tls"

// TrustedCADir is where a member in a hand-over mounts the trust Secret.
const TrustedCADir = "/etc/etcd/tls/trust"

// HandoverSecretName is the trust Secret of a cluster's TLS hand-over.
func HandoverSecretName(cluster string) string { return cluster + "-tls-handover" }

// TLSHash hashes a member's TLS, for AnnotationTLS.
func TLSHash(t *v1alpha2.MemberTLS) string {
	b, _ := json.Marshal(t)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:5])
}

// PodTLSCurrent reports whether a member's Pod was made from the member's
// TLS as it is. A Pod made before AnnotationTLS existed runs the Secrets
// its volumes name; one without the operator's TLS volumes (plain, or
// adopted from a legacy StatefulSet, whose volumes have other names) is
// taken as current unless the member is in a hand-over.
func PodTLSCurrent(pod *corev1.Pod, m *v1alpha2.EtcdMember) bool {
	if h, ok := pod.Annotations[AnnotationTLS]; ok {
		return h == TLSHash(m.Spec.TLS)
	}
	t := m.Spec.TLS
	if t == nil {
		return true
	}
	if t.TrustedCASecretRef != nil {
		return false
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		switch v.Name {
		case "tls-client":
			if v.Secret.SecretName != refName(t.ClientServerSecretRef) {
				return false
			}
		case "tls-peer":
			if v.Secret.SecretName != refName(t.PeerSecretRef) {
				return false
			}
		}
	}
	return true
}

func refName(r *corev1.LocalObjectReference) string {
	if r == nil {
		return ""
	}
	return r.Name
}

// SameSecrets reports whether two member TLS views mount the same
// certificate Secrets.
func SameSecrets(a, b *v1alpha2.MemberTLS) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return refName(a.ClientServerSecretRef) == refName(b.ClientServerSecretRef) && refName(a.PeerSecretRef) == refName(b.PeerSecretRef)
}

// TLSStage is where a member stands in a hand-over to final (the cluster's
// MemberTLSOf). A member whose Secrets are final's and that trusts no
// bundle is final whatever else differs (a member made before the peer
// identity existed keeps running as it is).
func TLSStage(m *v1alpha2.EtcdMember, final *v1alpha2.MemberTLS) int {
	t := m.Spec.TLS
	switch {
	case t == nil || final == nil:
		return StageFinal
	case SameSecrets(t, final) && t.TrustedCASecretRef == nil:
		return StageFinal
	case SameSecrets(t, final):
		return StageSwitched
	case t.TrustedCASecretRef != nil:
		return StageTrusting
	}
	return StageOld
}

// NextTLS is a member's TLS one stage on towards final, with trust the
// name of the trust Secret.
func NextTLS(m *v1alpha2.EtcdMember, final *v1alpha2.MemberTLS, trust string) *v1alpha2.MemberTLS {
	switch TLSStage(m, final) {
	case StageOld:
		next := m.Spec.TLS.DeepCopy()
		next.TrustedCASecretRef = &corev1.LocalObjectReference{Name: trust}
		next.PeerAllowedHostnames, next.PeerAllowedCommonNames = transitionalIdentity(m.Spec.TLS, final)
		return next
	case StageTrusting:
		next := final.DeepCopy()
		next.TrustedCASecretRef = &corev1.LocalObjectReference{Name: trust}
		next.PeerAllowedHostnames = slices.Clone(m.Spec.TLS.PeerAllowedHostnames)
		next.PeerAllowedCommonNames = slices.Clone(m.Spec.TLS.PeerAllowedCommonNames)
		return next
	}
	return final.DeepCopy()
}

// transitionalIdentity is who members accept as a peer while some present
// the old certificate and some the new: both identities when they are of
// one kind; otherwise, or when either side accepted any certificate of its
// CA, any certificate of the two CAs (etcd takes one kind of identity
// only).
func transitionalIdentity(old, final *v1alpha2.MemberTLS) (hostnames, commonNames []string) {
	switch {
	case len(old.PeerAllowedHostnames) > 0 && len(final.PeerAllowedHostnames) > 0:
		return union(old.PeerAllowedHostnames, final.PeerAllowedHostnames), nil
	case len(old.PeerAllowedCommonNames) > 0 && len(final.PeerAllowedCommonNames) > 0:
		return nil, union(old.PeerAllowedCommonNames, final.PeerAllowedCommonNames)
	}
	return nil, nil
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// MergeCAs appends to bundle the PEM certificates of each of more that it
// does not hold yet, in order: a bundle only grows while a hand-over runs,
// so a member never loses a CA it trusted. Anything but CERTIFICATE
// blocks is dropped.
func MergeCAs(bundle []byte, more ...[]byte) []byte {
	var out bytes.Buffer
	var seen [][]byte
	add := func(pemData []byte) {
		for {
			var block *pem.Block
			block, pemData = pem.Decode(pemData)
			if block == nil {
				return
			}
			if block.Type != "CERTIFICATE" || slices.ContainsFunc(seen, func(b []byte) bool { return bytes.Equal(b, block.Bytes) }) {
				continue
			}
			seen = append(seen, block.Bytes)
			_ = pem.Encode(&out, block)
		}
	}
	add(bundle)
	for _, m := range more {
		add(m)
	}
	return out.Bytes()
}
