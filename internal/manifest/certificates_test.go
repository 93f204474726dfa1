package manifest

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func tlsCluster(mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "cluster-uid"}}
	// Additional metadata is not copied onto Certificates (they are never
	// updated, so it would go stale).
	c.Status.Observed = &v1alpha2.ObservedClusterSpec{PodSettings: v1alpha2.PodSettings{AdditionalMetadata: &v1alpha2.AdditionalMetadata{Labels: map[string]string{"team": "a"}}}}
	for _, m := range mods {
		m(c)
	}
	return c
}

func serverIssuer(ref v1alpha2.IssuerReference, client *v1alpha2.IssuerReference) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) {
		if c.Spec.TLS == nil {
			c.Spec.TLS = &v1alpha2.EtcdClusterTLS{}
		}
		c.Spec.TLS.Client = &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{ServerIssuerRef: ref, OperatorClientIssuerRef: client}}
	}
}

func peerIssuer(ref v1alpha2.IssuerReference) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) {
		if c.Spec.TLS == nil {
			c.Spec.TLS = &v1alpha2.EtcdClusterTLS{}
		}
		c.Spec.TLS.Peer = &v1alpha2.PeerTLS{CertManager: &v1alpha2.PeerCertManager{IssuerRef: ref}}
	}
}

type wantCertificate struct {
	name, secret string
	dns, ips     []string
	usages       []string
	issuer       map[string]any
}

var (
	allUsages    = []string{"server auth", "client auth", "digital signature", "key encipherment"}
	clientUsages = []string{"client auth", "digital signature", "key encipherment"}
	serverNames  = []string{"*.db.ns.svc", "*.db.ns.svc.cluster.local", "db.ns.svc", "db.ns.svc.cluster.local",
		"db-client.ns.svc", "db-client.ns.svc.cluster.local", "db-client.ns", "db-client", "localhost"}
	peerNames = []string{"*.db.ns.svc", "*.db.ns.svc.cluster.local"}
)

func issuer(name, kind string) map[string]any {
	return map[string]any{"name": name, "kind": kind, "group": "cert-manager.io"}
}

func server(iss map[string]any) wantCertificate {
	return wantCertificate{name: "db-server", secret: "db-server-tls", dns: serverNames, ips: []string{"127.0.0.1"}, usages: allUsages, issuer: iss}
}

func operatorClient(iss map[string]any) wantCertificate {
	return wantCertificate{name: "db-operator-client", secret: "db-operator-client-tls", usages: clientUsages, issuer: iss}
}

func peer(iss map[string]any) wantCertificate {
	return wantCertificate{name: "db-peer", secret: "db-peer-tls", dns: peerNames, usages: allUsages, issuer: iss}
}

func TestCertificates(t *testing.T) {
	ca := v1alpha2.IssuerReference{Name: "ca"}
	clusterCA := v1alpha2.IssuerReference{Name: "root", Kind: "ClusterIssuer"}
	explicitIssuer := v1alpha2.IssuerReference{Name: "ca", Kind: "Issuer"}
	cases := []struct {
		name    string
		cluster *v1alpha2.EtcdCluster
		domain  string
		want    []wantCertificate
	}{
		{name: "no TLS", cluster: tlsCluster()},
		{name: "own Secrets", cluster: tlsCluster(func(c *v1alpha2.EtcdCluster) {
			c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
				Client: &v1alpha2.ClientTLS{ServerSecretRef: &corev1.LocalObjectReference{Name: "s"}},
				Peer:   &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "p"}},
			}
		})},
		{name: "server only, kind defaults to Issuer", cluster: tlsCluster(serverIssuer(ca, nil)),
			want: []wantCertificate{server(issuer("ca", "Issuer"))}},
		{name: "server and operator client", cluster: tlsCluster(serverIssuer(ca, &clusterCA)),
			want: []wantCertificate{server(issuer("ca", "Issuer")), operatorClient(issuer("root", "ClusterIssuer"))}},
		{name: "peer only, ClusterIssuer", cluster: tlsCluster(peerIssuer(clusterCA)),
			want: []wantCertificate{peer(issuer("root", "ClusterIssuer"))}},
		{name: "peer only, explicit Issuer", cluster: tlsCluster(peerIssuer(explicitIssuer)),
			want: []wantCertificate{peer(issuer("ca", "Issuer"))}},
		{name: "client and peer", cluster: tlsCluster(serverIssuer(clusterCA, &ca), peerIssuer(ca)),
			want: []wantCertificate{server(issuer("root", "ClusterIssuer")), operatorClient(issuer("ca", "Issuer")), peer(issuer("ca", "Issuer"))}},
		{name: "client from cert-manager, peer from an own Secret", cluster: tlsCluster(serverIssuer(ca, nil), func(c *v1alpha2.EtcdCluster) {
			c.Spec.TLS.Peer = &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "p"}}
		}), want: []wantCertificate{server(issuer("ca", "Issuer"))}},
		{name: "custom cluster domain", cluster: tlsCluster(serverIssuer(ca, nil), peerIssuer(ca)), domain: "corp.internal",
			want: []wantCertificate{
				withNames(server(issuer("ca", "Issuer")), "*.db.ns.svc", "*.db.ns.svc.corp.internal", "db.ns.svc", "db.ns.svc.corp.internal",
					"db-client.ns.svc", "db-client.ns.svc.corp.internal", "db-client.ns", "db-client", "localhost"),
				withNames(peer(issuer("ca", "Issuer")), "*.db.ns.svc", "*.db.ns.svc.corp.internal"),
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Certificates(tc.cluster, tc.domain)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d Certificates %v, want %d", len(got), names(got), len(tc.want))
			}
			for i, w := range tc.want {
				checkCertificate(t, tc.cluster, got[i], w)
			}
		})
	}
}

func withNames(w wantCertificate, dns ...string) wantCertificate {
	w.dns = dns
	return w
}

func names(us []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.GetName())
	}
	return out
}

func checkCertificate(t *testing.T, c *v1alpha2.EtcdCluster, u *unstructured.Unstructured, w wantCertificate) {
	t.Helper()
	if u.GetName() != w.name || u.GetNamespace() != "ns" || u.GetAPIVersion() != "cert-manager.io/v1" || u.GetKind() != "Certificate" {
		t.Errorf("%s: identity %s %s/%s", w.name, u.GroupVersionKind(), u.GetNamespace(), u.GetName())
	}
	if !maps.Equal(u.GetLabels(), ClusterLabels("db")) {
		t.Errorf("%s: labels %v, want the cluster's %v", w.name, u.GetLabels(), ClusterLabels("db"))
	}
	if owners := u.GetOwnerReferences(); len(owners) != 1 || !metav1.IsControlledBy(u, c) || owners[0].Kind != "EtcdCluster" {
		t.Errorf("%s: owners %+v, want the cluster as controller", w.name, owners)
	}
	str := func(field string) string { s, _, _ := unstructured.NestedString(u.Object, "spec", field); return s }
	list := func(field string) []string {
		s, _, _ := unstructured.NestedStringSlice(u.Object, "spec", field)
		return s
	}
	if str("secretName") != w.secret || str("commonName") != w.name {
		t.Errorf("%s: secretName %q commonName %q", w.name, str("secretName"), str("commonName"))
	}
	for field, want := range map[string][]string{"dnsNames": w.dns, "ipAddresses": w.ips, "usages": w.usages} {
		if got := list(field); !slices.Equal(got, want) {
			t.Errorf("%s: %s %q, want %q", w.name, field, got, want)
		}
	}
	if got, _, _ := unstructured.NestedMap(u.Object, "spec", "issuerRef"); !maps.Equal(got, w.issuer) {
		t.Errorf("%s: issuerRef %v, want %v", w.name, got, w.issuer)
	}
	if got, _, _ := unstructured.NestedMap(u.Object, "spec", "privateKey"); !maps.Equal(got, map[string]any{"algorithm": "RSA", "size": int64(2048)}) {
		t.Errorf("%s: privateKey %v", w.name, got)
	}
	// A Certificate must survive a deep copy (the client copies objects):
	// only JSON-compatible types are allowed in unstructured content.
	_ = u.DeepCopy()
}

func TestUsesCertManager(t *testing.T) {
	ca := v1alpha2.IssuerReference{Name: "ca"}
	cases := map[string]struct {
		cluster *v1alpha2.EtcdCluster
		want    bool
	}{
		"no TLS": {tlsCluster(), false},
		"own Secrets": {tlsCluster(func(c *v1alpha2.EtcdCluster) {
			c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "p"}}}
		}), false},
		"client": {tlsCluster(serverIssuer(ca, nil)), true},
		"peer":   {tlsCluster(peerIssuer(ca)), true},
	}
	for name, tc := range cases {
		if got := UsesCertManager(tc.cluster); got != tc.want {
			t.Errorf("%s: UsesCertManager = %t", name, got)
		}
	}
}
