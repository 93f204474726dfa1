package manifest

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// ClusterOwner is the controller reference of every object a cluster owns.
func ClusterOwner(c *v1alpha2.EtcdCluster) metav1.OwnerReference {
	return *metav1.NewControllerRef(c, v1alpha2.GroupVersion.WithKind("EtcdCluster"))
}

func clusterMeta(c *v1alpha2.EtcdCluster, name string) metav1.ObjectMeta {
	var md *v1alpha2.AdditionalMetadata
	if c.Status.Observed != nil {
		md = c.Status.Observed.AdditionalMetadata
	}
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          WithExtra(ClusterLabels(c.Name), ExtraLabels(md)),
		Annotations:     WithExtra(nil, ExtraAnnotations(md)),
		OwnerReferences: []metav1.OwnerReference{ClusterOwner(c)},
	}
}

// HeadlessService gives every member its stable DNS name
// <member>.<cluster>.<namespace>.svc, published before the member is ready
// because peers must find each other to become ready at all.
func HeadlessService(c *v1alpha2.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: clusterMeta(c, c.Name),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 ClusterSelector(c.Name),
			Ports:                    []corev1.ServicePort{ClientServicePort(), PeerServicePort()},
		},
	}
}

// ClientService is the load-balanced endpoint for clients. It selects voters
// only: a learner refuses most client requests. A member being removed
// leaves it when its Pod is deleted, right after etcd removed it.
func ClientService(c *v1alpha2.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: clusterMeta(c, ClientServiceName(c.Name)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: VoterSelector(c.Name),
			Ports:    []corev1.ServicePort{ClientServicePort()},
		},
	}
}

// VoterSelector selects the Pods of a cluster's voters.
func VoterSelector(cluster string) map[string]string {
	return map[string]string{LabelCluster: cluster, LabelRole: RoleVoter}
}

// ClientServicePort is the named client port of both Services.
func ClientServicePort() corev1.ServicePort {
	return corev1.ServicePort{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP}
}

// PeerServicePort is the named peer port of the headless Service.
func PeerServicePort() corev1.ServicePort {
	return corev1.ServicePort{Name: "peer", Port: PeerPort, TargetPort: intstr.FromInt32(PeerPort), Protocol: corev1.ProtocolTCP}
}

// PDBMinAvailable keeps a majority of the voters: of the larger of the voters
// etcd has (those being removed included) and the replicas wanted, so that a
// cluster still growing is protected as the cluster it will be. Voters the
// budget would count as available although they are not (being removed, or
// unhealthy with a Pod that still reads Ready) are counted on top.
func PDBMinAvailable(voters, replicas, unavailable int32) int32 {
	anchor := max(voters, replicas)
	if anchor < 1 {
		return 0
	}
	return anchor/2 + 1 + unavailable
}

// PodDisruptionBudget covers voters only: learners and dormant members
// carry no role label (members being removed may: the minimum counts them).
func PodDisruptionBudget(c *v1alpha2.EtcdCluster, minAvailable int32) *policyv1.PodDisruptionBudget {
	value := intstr.FromInt32(minAvailable)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: clusterMeta(c, c.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &value,
			Selector:     &metav1.LabelSelector{MatchLabels: VoterSelector(c.Name)},
		},
	}
}

// NewMember renders a new EtcdMember of a cluster from its latched target.
// Its name is the cluster's with a random suffix, chosen here rather than by
// the API server (GenerateName) so that the one create can carry what
// depends on the name (a seed's initialCluster, a joiner's join cluster);
// a name still taken makes the create fail with AlreadyExists, and the next
// pass draws another. initialCluster stays empty until etcd knows the member.
func NewMember(c *v1alpha2.EtcdCluster, seed bool) *v1alpha2.EtcdMember {
	o := c.Status.Observed
	m := &v1alpha2.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{
			Name:            MemberName(c.Name),
			Namespace:       c.Namespace,
			Labels:          WithExtra(ClusterLabels(c.Name), ExtraLabels(o.AdditionalMetadata)),
			Annotations:     WithExtra(nil, ExtraAnnotations(o.AdditionalMetadata)),
			OwnerReferences: []metav1.OwnerReference{ClusterOwner(c)},
		},
		Spec: v1alpha2.EtcdMemberSpec{
			ClusterName:  c.Name,
			ServiceName:  c.Name,
			Version:      o.Version,
			Storage:      *o.Storage.DeepCopy(),
			PodSettings:  *o.PodSettings.DeepCopy(),
			Bootstrap:    seed,
			ClusterToken: c.Status.ClusterToken,
			Replicas:     1,
			TLS:          MemberTLSOf(c),
		},
	}
	if seed && c.Spec.Bootstrap != nil && c.Spec.Bootstrap.Restore != nil {
		m.Spec.Restore = c.Spec.Bootstrap.Restore.DeepCopy()
	}
	return m
}

// MemberName draws a new member's name the way the API server fills in a
// GenerateName of cluster+"-": five random characters after the cluster's
// name, cut so that the whole is a DNS label (the member's Pod hostname).
func MemberName(cluster string) string {
	const suffix, most = 5, validation.DNS1123LabelMaxLength
	base := cluster + "-"
	if len(base) > most-suffix {
		base = base[:most-suffix]
	}
	return base + utilrand.String(suffix)
}

// Names of the Secrets cert-manager writes for a cluster.
func ServerTLSSecretName(cluster string) string { return cluster + "-server-tls" }

// OperatorClientTLSSecretName is the Secret of the operator's client certificate.
func OperatorClientTLSSecretName(cluster string) string { return cluster + "-operator-client-tls" }

// PeerTLSSecretName is the Secret of the peer certificate.
func PeerTLSSecretName(cluster string) string { return cluster + "-peer-tls" }

// MemberTLSOf resolves the cluster's TLS into the Secret names a member mounts,
// whether the user brings the Secrets or cert-manager writes them.
func MemberTLSOf(c *v1alpha2.EtcdCluster) *v1alpha2.MemberTLS {
	out := &v1alpha2.MemberTLS{PeerAutoTLS: c.Annotations[AnnotationPeerAutoTLS] == "true"}
	if t := c.Spec.TLS; t != nil {
		resolveClientTLS(c.Name, t.Client, out)
		if p := t.Peer; p != nil {
			out.PeerAutoTLS = false
			out.PeerSecretRef = p.SecretRef
			if p.CertManager != nil {
				out.PeerSecretRef = &corev1.LocalObjectReference{Name: PeerTLSSecretName(c.Name)}
			}
			out.PeerAllowedHostnames, out.PeerAllowedCommonNames = peerIdentity(c, p)
		}
	}
	if equality.Semantic.DeepEqual(out, &v1alpha2.MemberTLS{}) {
		return nil
	}
	return out
}

// peerIdentity is who the members accept as a peer: what the user set, or,
// for a certificate the operator asks cert-manager for, a name under the
// members' wildcard, which that certificate covers and no other cluster's
// does. A certificate the CA signed for anything else (another cluster's
// members, a client) is refused on the peer port.
func peerIdentity(c *v1alpha2.EtcdCluster, p *v1alpha2.PeerTLS) (hostnames, commonNames []string) {
	switch {
	case len(p.AllowedHostnames) > 0 || len(p.AllowedCommonNames) > 0:
		return slices.Clone(p.AllowedHostnames), slices.Clone(p.AllowedCommonNames)
	case p.CertManager != nil:
		return []string{PeerIdentityHostname(c)}, nil
	}
	return nil, nil
}

// PeerIdentityHostname is the name a cert-manager-issued peer certificate
// is checked against: one under *.<cluster>.<namespace>.svc, among the
// certificate's names (see peerCertificate).
func PeerIdentityHostname(c *v1alpha2.EtcdCluster) string {
	return "peer." + c.Name + "." + c.Namespace + ".svc"
}

func resolveClientTLS(cluster string, t *v1alpha2.ClientTLS, out *v1alpha2.MemberTLS) {
	if t == nil {
		return
	}
	if t.ServerSecretRef != nil {
		out.ClientServerSecretRef = t.ServerSecretRef.DeepCopy()
		out.ClientMTLS = t.OperatorClientSecretRef != nil
	}
	if cm := t.CertManager; cm != nil {
		out.ClientServerSecretRef = &corev1.LocalObjectReference{Name: ServerTLSSecretName(cluster)}
		out.ClientMTLS = cm.OperatorClientIssuerRef != nil
	}
}

// Replicas is the number of members a spec asks for (3 when unset).
func Replicas(s *v1alpha2.EtcdClusterSpec) int32 {
	if s.Replicas == nil {
		return 3
	}
	return *s.Replicas
}

// Observe copies the parts of a spec that the operator acts on: the target
// it latches. etcd-migrate latches an adopted cluster's first target with it
// too, so that the operator finds its members up to date and restarts none.
func Observe(s *v1alpha2.EtcdClusterSpec) *v1alpha2.ObservedClusterSpec {
	s = s.DeepCopy()
	storage := s.Storage
	if storage.Size.IsZero() {
		storage.Size = resource.MustParse("1Gi")
	}
	return &v1alpha2.ObservedClusterSpec{
		Replicas:    Replicas(s),
		Version:     s.Version,
		Storage:     storage,
		PodSettings: s.PodSettings,
	}
}
