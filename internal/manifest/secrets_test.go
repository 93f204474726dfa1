package manifest

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func tlsMember(t *v1alpha2.MemberTLS) *v1alpha2.EtcdMember {
	return &v1alpha2.EtcdMember{Spec: v1alpha2.EtcdMemberSpec{TLS: t}}
}

func ref(name string) *corev1.LocalObjectReference { return &corev1.LocalObjectReference{Name: name} }

func TestMountedSecrets(t *testing.T) {
	cases := []struct {
		name string
		tls  *v1alpha2.MemberTLS
		want []SecretUse
	}{
		{"plaintext", nil, nil},
		{"peer auto TLS mounts nothing", &v1alpha2.MemberTLS{PeerAutoTLS: true}, nil},
		{"server TLS: no CA needed", &v1alpha2.MemberTLS{ClientServerSecretRef: ref("srv")},
			[]SecretUse{{Name: "srv", Purpose: "client server certificate", Keys: []string{KeyCert, KeyKey}}}},
		{"mutual TLS: the CA checks clients", &v1alpha2.MemberTLS{ClientServerSecretRef: ref("srv"), ClientMTLS: true},
			[]SecretUse{{Name: "srv", Purpose: "client server certificate", Keys: []string{KeyCert, KeyKey, KeyCA}}}},
		{"peer TLS", &v1alpha2.MemberTLS{PeerSecretRef: ref("peer")},
			[]SecretUse{{Name: "peer", Purpose: "peer certificate", Keys: []string{KeyCert, KeyKey, KeyCA}}}},
		{"both planes", &v1alpha2.MemberTLS{ClientServerSecretRef: ref("srv"), PeerSecretRef: ref("peer")},
			[]SecretUse{{Name: "srv", Purpose: "client server certificate", Keys: []string{KeyCert, KeyKey}}, {Name: "peer", Purpose: "peer certificate", Keys: []string{KeyCert, KeyKey, KeyCA}}}},
	}
	for _, c := range cases {
		got := MountedSecrets(tlsMember(c.tls))
		if !slices.EqualFunc(got, c.want, func(a, b SecretUse) bool {
			return a.Name == b.Name && a.Purpose == b.Purpose && slices.Equal(a.Keys, b.Keys)
		}) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestMissingKey(t *testing.T) {
	u := SecretUse{Name: "peer", Keys: []string{KeyCert, KeyKey, KeyCA}}
	full := map[string][]byte{KeyCert: []byte("c"), KeyKey: []byte("k"), KeyCA: []byte("a")}
	if k := u.MissingKey(&corev1.Secret{Data: full}); k != "" {
		t.Errorf("complete Secret: missing %q", k)
	}
	for _, drop := range []string{KeyCert, KeyKey, KeyCA} {
		d := map[string][]byte{}
		for k, v := range full {
			if k != drop {
				d[k] = v
			}
		}
		if k := u.MissingKey(&corev1.Secret{Data: d}); k != drop {
			t.Errorf("without %s: missing %q", drop, k)
		}
		d[drop] = nil
		if k := u.MissingKey(&corev1.Secret{Data: d}); k != drop {
			t.Errorf("with an empty %s: missing %q", drop, k)
		}
	}
}

func TestSecretHashes(t *testing.T) {
	m := tlsMember(&v1alpha2.MemberTLS{ClientServerSecretRef: ref("srv"), PeerSecretRef: ref("peer")})
	secret := func(crt, ca, other string) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{KeyCert: []byte(crt), KeyKey: []byte("key"), KeyCA: []byte(ca), "other": []byte(other)}}
	}
	before := HashSecrets(MountedSecrets(m), map[string]*corev1.Secret{"srv": secret("s1", "ca1", "x"), "peer": secret("p1", "ca1", "x")})
	recorded := SecretHashes(before)
	cases := []struct {
		name    string
		srv     *corev1.Secret
		peer    *corev1.Secret
		changed []string
	}{
		{"nothing changed", secret("s1", "ca1", "x"), secret("p1", "ca1", "x"), nil},
		{"a key the member does not read", secret("s1", "ca1", "y"), secret("p1", "ca1", "y"), nil},
		// Server TLS without mTLS does not read the CA.
		{"the server Secret's CA, unread", secret("s1", "ca2", "x"), secret("p1", "ca1", "x"), nil},
		{"a renewed server certificate", secret("s2", "ca1", "x"), secret("p1", "ca1", "x"), []string{"srv"}},
		{"a new peer CA", secret("s1", "ca1", "x"), secret("p1", "ca2", "x"), []string{"peer"}},
		{"both", secret("s2", "ca1", "x"), secret("p2", "ca1", "x"), []string{"peer", "srv"}},
		{"a Secret that is gone counts as unchanged", nil, secret("p1", "ca1", "x"), nil},
	}
	for _, c := range cases {
		cur := map[string]*corev1.Secret{"peer": c.peer}
		if c.srv != nil {
			cur["srv"] = c.srv
		}
		got := ChangedSecrets(recorded, HashSecrets(MountedSecrets(m), cur))
		if !slices.Equal(got, c.changed) {
			t.Errorf("%s: changed %v, want %v", c.name, got, c.changed)
		}
	}
	if got := ChangedSecrets("", before); got != nil {
		t.Errorf("a Pod that recorded nothing: changed %v", got)
	}
	// One Secret for both planes is hashed over the keys of both.
	same := tlsMember(&v1alpha2.MemberTLS{ClientServerSecretRef: ref("one"), PeerSecretRef: ref("one")})
	h1 := HashSecrets(MountedSecrets(same), map[string]*corev1.Secret{"one": secret("c", "ca1", "x")})
	h2 := HashSecrets(MountedSecrets(same), map[string]*corev1.Secret{"one": secret("c", "ca2", "x")})
	if len(h1) != 1 || h1["one"] == h2["one"] {
		t.Errorf("shared Secret: hashes %v and %v", h1, h2)
	}
}

func TestPodRecordsSecretHashes(t *testing.T) {
	m := tlsMember(&v1alpha2.MemberTLS{PeerSecretRef: ref("peer")})
	m.Name, m.Spec.Version = "db-a", "3.6.16"
	if _, ok := Pod(m, PodOptions{}).Annotations[AnnotationSecretHashes]; ok {
		t.Error("a Pod without material recorded an empty annotation")
	}
	if got := Pod(m, PodOptions{SecretHashes: "peer=abc"}).Annotations[AnnotationSecretHashes]; got != "peer=abc" {
		t.Errorf("annotation %q", got)
	}
}
