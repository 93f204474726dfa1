package manifest

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// AnnotationSecretHashes on a member Pod records the certificate material
// the Pod was started with: "secret=hash" per Secret it mounts, sorted. etcd
// reads a changed certificate on its next connection but loads its trusted
// CAs once, at start; a Pod whose Secrets changed since is restarted by a
// roll-out. A Pod without the annotation (made before it existed) is taken
// as current.
const AnnotationSecretHashes = Prefix + "secret-hashes"

// Keys of a kubernetes.io/tls Secret that a member reads.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// SecretUse is a Secret a member mounts and the keys it reads from it.
type SecretUse struct {
	Name string
	// Purpose says what the member uses it for, for messages.
	Purpose string
	Keys    []string
	// PeerHostnames and PeerCommonNames, for the peer certificate, are the
	// identities one of which its certificate must carry: the members
	// refuse any other peer, so a certificate without one would cut each
	// member off from the others.
	PeerHostnames, PeerCommonNames []string
}

// MountedSecrets lists the Secrets a member's Pod mounts, with the keys its
// flags point at (see tlsFlags).
func MountedSecrets(m *v1alpha2.EtcdMember) []SecretUse {
	t := m.Spec.TLS
	if t == nil {
		return nil
	}
	var out []SecretUse
	if t.ClientServerSecretRef != nil {
		keys := []string{KeyCert, KeyKey}
		if t.ClientMTLS {
			keys = append(keys, KeyCA)
		}
		out = append(out, SecretUse{Name: t.ClientServerSecretRef.Name, Purpose: "client server certificate", Keys: keys})
	}
	if t.PeerSecretRef != nil {
		out = append(out, PeerSecretUse(t))
	}
	if t.TrustedCASecretRef != nil {
		var keys []string
		if t.ClientServerSecretRef != nil && t.ClientMTLS {
			keys = append(keys, KeyClientCA)
		}
		if t.PeerSecretRef != nil {
			keys = append(keys, KeyPeerCA)
		}
		out = append(out, SecretUse{Name: t.TrustedCASecretRef.Name, Purpose: "CAs trusted during the TLS hand-over", Keys: keys})
	}
	return out
}

// PeerSecretUse is the member's use of its peer certificate's Secret.
func PeerSecretUse(t *v1alpha2.MemberTLS) SecretUse {
	return SecretUse{Name: t.PeerSecretRef.Name, Purpose: "peer certificate", Keys: []string{KeyCert, KeyKey, KeyCA},
		PeerHostnames: t.PeerAllowedHostnames, PeerCommonNames: t.PeerAllowedCommonNames}
}

// Mismatch says how the Secret's certificate fails the peer identity the
// members require, or "" when it carries one (or none is required). A
// missing certificate is MissingKey's to report.
func (u SecretUse) Mismatch(s *corev1.Secret) string {
	if len(u.PeerHostnames) == 0 && len(u.PeerCommonNames) == 0 || len(s.Data[KeyCert]) == 0 {
		return ""
	}
	block, _ := pem.Decode(s.Data[KeyCert])
	if block == nil {
		return "its " + KeyCert + " holds no PEM certificate"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Sprintf("its %s does not parse: %v", KeyCert, err)
	}
	for _, h := range u.PeerHostnames {
		if cert.VerifyHostname(h) == nil {
			return ""
		}
	}
	if slices.Contains(u.PeerCommonNames, cert.Subject.CommonName) {
		return ""
	}
	if len(u.PeerHostnames) > 0 {
		return fmt.Sprintf("its certificate is valid for none of the names the members accept from a peer (%s); it names %s. "+
			"Issue it for one of them",
			strings.Join(u.PeerHostnames, ", "), certNames(cert))
	}
	return fmt.Sprintf("its certificate's common name %q is none of those the members accept from a peer (%s). "+
		"Issue it with one of them",
		cert.Subject.CommonName, strings.Join(u.PeerCommonNames, ", "))
}

// certNames lists what a certificate is valid for, for messages.
func certNames(c *x509.Certificate) string {
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no DNS name or IP address"
	}
	return strings.Join(names, ", ")
}

// MissingKey names the first key a Secret lacks (or holds empty), or "".
func (u SecretUse) MissingKey(s *corev1.Secret) string {
	for _, k := range u.Keys {
		if len(s.Data[k]) == 0 {
			return k
		}
	}
	return ""
}

// HashSecrets hashes, per Secret, the keys the member reads from it (a
// Secret mounted for both planes over the keys of both): other keys may
// change without restarting anything. Secrets absent from the map are left
// out.
func HashSecrets(uses []SecretUse, secrets map[string]*corev1.Secret) map[string]string {
	keys := map[string][]string{}
	for _, u := range uses {
		for _, k := range u.Keys {
			if !slices.Contains(keys[u.Name], k) {
				keys[u.Name] = append(keys[u.Name], k)
			}
		}
	}
	out := map[string]string{}
	for name, ks := range keys {
		s := secrets[name]
		if s == nil {
			continue
		}
		slices.Sort(ks)
		h := sha256.New()
		for _, k := range ks {
			fmt.Fprintf(h, "%s:%d:", k, len(s.Data[k]))
			h.Write(s.Data[k])
		}
		out[name] = hex.EncodeToString(h.Sum(nil)[:5])
	}
	return out
}

// SecretHashes renders AnnotationSecretHashes from "secret name -> hash".
func SecretHashes(hashes map[string]string) string {
	parts := make([]string, 0, len(hashes))
	for name, h := range hashes {
		parts = append(parts, name+"="+h)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// ChangedSecrets lists the Secrets whose hash recorded on a Pod (an
// AnnotationSecretHashes value) differs from the current one. A Pod that
// recorded nothing, or a Secret it did not record, counts as unchanged:
// those Pods predate the annotation or the Secret.
func ChangedSecrets(recorded string, current map[string]string) []string {
	if recorded == "" {
		return nil
	}
	var out []string
	for _, part := range strings.Split(recorded, ",") {
		name, h, ok := strings.Cut(part, "=")
		if cur, known := current[name]; ok && known && cur != h {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
