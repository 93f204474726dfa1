package manifest

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// CertificateGVK is cert-manager's Certificate kind. The operator writes
// Certificates as unstructured objects: it does not link cert-manager's Go
// API, and runs (without cert-manager features) where cert-manager is absent.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// DefaultClusterDomain is the cluster DNS domain when none is configured.
const DefaultClusterDomain = "cluster.local"

// Names of the Certificates the operator creates for a cluster.
func ServerCertificateName(cluster string) string { return cluster + "-server" }

// OperatorClientCertificateName is the Certificate of the operator's client identity.
func OperatorClientCertificateName(cluster string) string { return cluster + "-operator-client" }

// PeerCertificateName is the Certificate of the peer plane.
func PeerCertificateName(cluster string) string { return cluster + "-peer" }

// Key usages (cert-manager's spelling).
const (
	usageServerAuth       = "server auth"
	usageClientAuth       = "client auth"
	usageDigitalSignature = "digital signature"
	usageKeyEncipherment  = "key encipherment"
)

// certificateSpec is the part of cert-manager's CertificateSpec the operator
// sets; the JSON names are cert-manager's.
type certificateSpec struct {
	SecretName  string     `json:"secretName"`
	CommonName  string     `json:"commonName"`
	DNSNames    []string   `json:"dnsNames,omitempty"`
	IPAddresses []string   `json:"ipAddresses,omitempty"`
	Usages      []string   `json:"usages"`
	IssuerRef   issuerRef  `json:"issuerRef"`
	PrivateKey  privateKey `json:"privateKey"`
}

type namedSpec struct {
	name string
	spec certificateSpec
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Group string `json:"group"`
}

type privateKey struct {
	Algorithm string `json:"algorithm"`
	Size      int64  `json:"size"`
}

// Certificates renders the cert-manager Certificates a cluster's TLS spec
// asks for (none when it asks for none): the server certificate, the
// operator's client certificate with operatorClientIssuerRef, and the peer
// certificate. They carry the cluster's labels and its controller
// reference; they are created once and never changed, so the user's
// additional metadata (which may change) is not copied onto them. domain
// is the cluster DNS domain; "" means cluster.local.
func Certificates(c *v1alpha2.EtcdCluster, domain string) ([]*unstructured.Unstructured, error) {
	if domain == "" {
		domain = DefaultClusterDomain
	}
	var specs []namedSpec
	if t := c.Spec.TLS; t != nil && t.Client != nil && t.Client.CertManager != nil {
		cm := t.Client.CertManager
		specs = append(specs, namedSpec{ServerCertificateName(c.Name), serverCertificate(c, domain, cm.ServerIssuerRef)})
		if cm.OperatorClientIssuerRef != nil {
			specs = append(specs, namedSpec{OperatorClientCertificateName(c.Name), operatorClientCertificate(c, *cm.OperatorClientIssuerRef)})
		}
	}
	if t := c.Spec.TLS; t != nil && t.Peer != nil && t.Peer.CertManager != nil {
		specs = append(specs, namedSpec{PeerCertificateName(c.Name), peerCertificate(c, domain, t.Peer.CertManager.IssuerRef)})
	}
	out := make([]*unstructured.Unstructured, 0, len(specs))
	for _, s := range specs {
		u, err := certificate(c, s.name, s.spec)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// serverCertificate covers every name the client plane is reached at: each
// member through the headless Service (the operator and members dial
// <member>.<cluster>.<ns>.svc), the headless and client Services themselves,
// each with and without the cluster domain (the client Service also by its
// short names, as clients in the namespace dial it), and localhost for tools
// inside a member's Pod.
func serverCertificate(c *v1alpha2.EtcdCluster, domain string, ref v1alpha2.IssuerReference) certificateSpec {
	client := ClientServiceName(c.Name)
	dns := append(memberNames(c, domain), withDomain(c.Name+"."+c.Namespace+".svc", domain)...)
	dns = append(dns, withDomain(client+"."+c.Namespace+".svc", domain)...)
	dns = append(dns, client+"."+c.Namespace, client, "localhost")
	return certificateSpec{
		SecretName:  ServerTLSSecretName(c.Name),
		CommonName:  ServerCertificateName(c.Name),
		DNSNames:    dns,
		IPAddresses: []string{"127.0.0.1"},
		Usages:      []string{usageServerAuth, usageClientAuth, usageDigitalSignature, usageKeyEncipherment},
		IssuerRef:   issuerOf(ref),
		PrivateKey:  rsa2048(),
	}
}

// operatorClientCertificate is the identity the operator presents to etcd.
func operatorClientCertificate(c *v1alpha2.EtcdCluster, ref v1alpha2.IssuerReference) certificateSpec {
	return certificateSpec{
		SecretName: OperatorClientTLSSecretName(c.Name),
		CommonName: OperatorClientCertificateName(c.Name),
		Usages:     []string{usageClientAuth, usageDigitalSignature, usageKeyEncipherment},
		IssuerRef:  issuerOf(ref),
		PrivateKey: rsa2048(),
	}
}

// peerCertificate is both server and client of the peer plane. etcd checks
// a peer's certificate against the name its address resolves back to, the
// form with the cluster domain, so both forms are needed.
func peerCertificate(c *v1alpha2.EtcdCluster, domain string, ref v1alpha2.IssuerReference) certificateSpec {
	return certificateSpec{
		SecretName: PeerTLSSecretName(c.Name),
		CommonName: PeerCertificateName(c.Name),
		DNSNames:   memberNames(c, domain),
		Usages:     []string{usageServerAuth, usageClientAuth, usageDigitalSignature, usageKeyEncipherment},
		IssuerRef:  issuerOf(ref),
		PrivateKey: rsa2048(),
	}
}

// memberNames are the wildcards of the members' names under the headless
// Service, which new members are named under (see NewMember's ServiceName).
func memberNames(c *v1alpha2.EtcdCluster, domain string) []string {
	return withDomain("*."+c.Name+"."+c.Namespace+".svc", domain)
}

func withDomain(name, domain string) []string { return []string{name, name + "." + domain} }

func issuerOf(ref v1alpha2.IssuerReference) issuerRef {
	kind := string(ref.Kind)
	if kind == "" {
		kind = "Issuer"
	}
	return issuerRef{Name: ref.Name, Kind: kind, Group: CertificateGVK.Group}
}

func rsa2048() privateKey { return privateKey{Algorithm: "RSA", Size: 2048} }

func certificate(c *v1alpha2.EtcdCluster, name string, spec certificateSpec) (*unstructured.Unstructured, error) {
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return nil, fmt.Errorf("rendering Certificate %s: %w", name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetGroupVersionKind(CertificateGVK)
	u.SetName(name)
	u.SetNamespace(c.Namespace)
	u.SetLabels(ClusterLabels(c.Name))
	u.SetOwnerReferences([]metav1.OwnerReference{ClusterOwner(c)})
	return u, nil
}

// UsesCertManager reports whether any plane of the cluster is issued by cert-manager.
func UsesCertManager(c *v1alpha2.EtcdCluster) bool {
	t := c.Spec.TLS
	return t != nil && ((t.Client != nil && t.Client.CertManager != nil) || (t.Peer != nil && t.Peer.CertManager != nil))
}
