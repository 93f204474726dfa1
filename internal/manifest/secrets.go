package manifest

import (
	"crypto/sha256"
	"encoding/hex"
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
		out = append(out, SecretUse{Name: t.PeerSecretRef.Name, Purpose: "peer certificate", Keys: []string{KeyCert, KeyKey, KeyCA}})
	}
	return out
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
