package manifest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/join"
)

// AnnotationJoinCluster on an EtcdMember not yet added to etcd is the
// initial cluster it will join with: etcd's membership with the member
// itself. With it, the member's Pod starts before the add, held by the join
// gate, so that its DNS name exists before etcd's leader first looks it up.
const AnnotationJoinCluster = Prefix + "join-initial-cluster"

// JoinGateContainer is the name of the init container that holds a joining
// member's etcd until the member is added.
const JoinGateContainer = "await-join"

// InitialClusterOf is the --initial-cluster a member's etcd starts with:
// recorded once the member joined, or the one it will join with.
func InitialClusterOf(m *v1alpha2.EtcdMember) string {
	if m.Spec.InitialCluster != "" {
		return m.Spec.InitialCluster
	}
	return m.Annotations[AnnotationJoinCluster]
}

// EarlyStart reports whether a member not yet added to etcd may have its Pod:
// it has a join cluster and the operator's image holds the gate.
func EarlyStart(m *v1alpha2.EtcdMember, operatorImage string) bool {
	return m.Spec.InitialCluster == "" && m.Annotations[AnnotationJoinCluster] != "" && operatorImage != "" && !m.Spec.Bootstrap
}

// joinGate is the init container of a member started before it joined.
func joinGate(m *v1alpha2.EtcdMember, opts PodOptions) []corev1.Container {
	if !EarlyStart(m, opts.OperatorImage) {
		return nil
	}
	own := PeerURL(m)
	var peers []string
	for _, pair := range strings.Split(m.Annotations[AnnotationJoinCluster], ",") {
		if _, url, ok := strings.Cut(pair, "="); ok && url != own {
			peers = append(peers, url)
		}
	}
	c := corev1.Container{
		Name:    JoinGateContainer,
		Image:   opts.OperatorImage,
		Command: []string{ToolsBinary, "await-join"},
		Env: []corev1.EnvVar{
			{Name: join.EnvPeerURL, Value: own},
			{Name: join.EnvPeers, Value: strings.Join(peers, ",")},
		},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
		}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	switch t := m.Spec.TLS; {
	case t != nil && t.PeerSecretRef != nil:
		c.Env = append(c.Env, corev1.EnvVar{Name: join.EnvTLSDir, Value: PeerTLSDir})
		c.VolumeMounts = []corev1.VolumeMount{{Name: "tls-peer", MountPath: PeerTLSDir, ReadOnly: true}}
	case t != nil && t.PeerAutoTLS:
		c.Env = append(c.Env, corev1.EnvVar{Name: join.EnvSelfSigned, Value: "true"})
	}
	return []corev1.Container{c}
}
