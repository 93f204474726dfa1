// Package manifest holds pure functions from the API objects to the Kubernetes
// objects the operator creates: no client, no clock, no randomness. Every
// name, label, flag and port the operator renders is decided here.
package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// Label and annotation keys.
const (
	Prefix = "etcd-operator.cozystack.io/"

	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	LabelCluster   = Prefix + "cluster"
	LabelRole      = Prefix + "role"
	RoleVoter      = "voter"

	// AnnotationHeadlessService overrides the Service a member's DNS names
	// live under (stamped by etcd-migrate on adopted members).
	AnnotationHeadlessService = Prefix + "headless-service-name"
	// AnnotationAdoptedPod marks a Pod the operator did not render: one
	// etcd-migrate handed to a member. Its container writes no termination
	// message. (Pods adopted before the marker existed carry no template
	// hash either, and are recognised by that.)
	AnnotationAdoptedPod = Prefix + "adopted-pod"
	// AnnotationDataDirSubPath puts the data directory under /var/lib/etcd/<subpath>.
	AnnotationDataDirSubPath = Prefix + "data-dir-subpath"
	// AnnotationRunAsUser on an adopted member is the user its legacy Pod ran
	// etcd as (stamped by etcd-migrate; "0" when the legacy Pod named none,
	// as etcd's images run as root). The data on its claim belongs to that
	// user, so the operator's Pod for the member runs etcd as that user too,
	// without an fsGroup, rather than as its own non-root user, which could
	// not open the data directory.
	AnnotationRunAsUser = Prefix + "run-as-user"
	// AnnotationPeerAutoTLS on a cluster runs the peer plane with --peer-auto-tls.
	AnnotationPeerAutoTLS = Prefix + "peer-auto-tls"
	// AnnotationInitialClusterState on a member Pod feeds etcd's
	// ETCD_INITIAL_CLUSTER_STATE through the downward API. The kubelet reads it
	// at every container start, so the operator can switch a seed to
	// "existing" once the cluster formed and a restart with a lost data dir
	// never bootstraps a second cluster.
	AnnotationInitialClusterState = Prefix + "initial-cluster-state"

	// AnnotationRecover on an EtcdCluster asks for a recovery from quorum
	// loss: RecoverDryRun has the operator only plan it (status.recovery),
	// and the plan's token carries that plan out.
	AnnotationRecover = Prefix + "recover"
	// AnnotationRecoverFromSnapshot names, beside AnnotationRecover, an
	// EtcdSnapshot to rebuild the cluster from instead of a survivor.
	AnnotationRecoverFromSnapshot = Prefix + "recover-from-snapshot"
	// AnnotationRecoverDiscardVolumes "true" on an EtcdCluster, when a
	// recovery plan is made, has the plan delete the discarded members'
	// claims with them instead of keeping them (LabelDiscardedFrom).
	AnnotationRecoverDiscardVolumes = Prefix + "recover-discard-volumes"
	// LabelDiscardedFrom names, on a claim a recovery kept, the cluster
	// whose discarded member it held.
	LabelDiscardedFrom = Prefix + "discarded-from"
	// AnnotationForceNewCluster marks the survivor of a recovery. On the
	// EtcdMember it holds the plan's token, and reaches the Pod only while
	// the cluster's recovery record backs it (ForceAuthorized); on the
	// member's Pod, "true" feeds
	// etcd's ETCD_FORCE_NEW_CLUSTER through the downward API, read at every
	// start of the container, so the operator takes it off the Pod (and
	// the member) as soon as the survivor serves alone, and no restart after
	// that forces again.
	AnnotationForceNewCluster = Prefix + "force-new-cluster"

	// AnnotationAllowDeletion "true" (exactly) on an EtcdMember lets anyone
	// delete it past the chart's admission guard (memberDeletionProtection),
	// which otherwise admits only the operator and Kubernetes' own
	// controllers. The operator itself never reads it.
	AnnotationAllowDeletion = Prefix + "allow-deletion"

	// RecoverDryRun is the AnnotationRecover value that only plans.
	RecoverDryRun = "dry-run"

	// MemberFinalizer removes the member from etcd before the EtcdMember goes.
	MemberFinalizer = Prefix + "member-cleanup"

	ManagedBy = "etcd-operator"
)

// Ports and paths.
const (
	ClientPort  = 2379
	PeerPort    = 2380
	MetricsPort = 2381

	DataDir       = "/var/lib/etcd"
	ClientTLSDir  = "/etc/etcd/tls/client"
	PeerTLSDir    = "/etc/etcd/tls/peer"
	EtcdContainer = "etcd"

	DefaultEtcdRepository = "quay.io/coreos/etcd"
)

// ClientServiceName is the ClusterIP Service clients use.
func ClientServiceName(cluster string) string { return cluster + "-client" }

// PVCName is the data volume claim of a member.
func PVCName(member string) string { return "data-" + member }

// ServiceName is the headless Service a member's DNS names live under: the
// one recorded in its spec; for a member created without one, the legacy
// annotation or the cluster name (which the member controller then records).
func ServiceName(m *v1alpha2.EtcdMember) string {
	if m.Spec.ServiceName != "" {
		return m.Spec.ServiceName
	}
	if s := m.Annotations[AnnotationHeadlessService]; s != "" {
		return s
	}
	return m.Spec.ClusterName
}

func scheme(secure bool) string {
	if secure {
		return "https"
	}
	return "http"
}

// PeerURL is the URL other members reach this member's peer port at.
func PeerURL(m *v1alpha2.EtcdMember) string {
	secure := m.Spec.TLS != nil && (m.Spec.TLS.PeerSecretRef != nil || m.Spec.TLS.PeerAutoTLS)
	return fmt.Sprintf("%s://%s.%s.%s.svc:%d", scheme(secure), m.Name, ServiceName(m), m.Namespace, PeerPort)
}

// ClientURL is the URL the operator and clients reach this member at.
func ClientURL(m *v1alpha2.EtcdMember) string {
	secure := m.Spec.TLS != nil && m.Spec.TLS.ClientServerSecretRef != nil
	return fmt.Sprintf("%s://%s.%s.%s.svc:%d", scheme(secure), m.Name, ServiceName(m), m.Namespace, ClientPort)
}

// HealthURL is the member's /health as its readiness probe asks it: on
// the metrics listener, which is plain HTTP.
func HealthURL(m *v1alpha2.EtcdMember) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:%d%s", m.Name, ServiceName(m), m.Namespace, MetricsPort, ReadinessPath)
}

// ClusterToken is the --initial-cluster-token of a new cluster: unique per
// EtcdCluster incarnation because it carries the UID.
func ClusterToken(c *v1alpha2.EtcdCluster) string {
	return fmt.Sprintf("%s-%s-%s", c.Namespace, c.Name, c.UID)
}

// InitialCluster renders etcd's --initial-cluster from name=peerURL pairs,
// sorted so that the same membership always renders the same string.
func InitialCluster(peers map[string]string) string {
	parts := make([]string, 0, len(peers))
	for name, url := range peers {
		parts = append(parts, name+"="+url)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

var subPathRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

// MemberDataDir is the data directory inside the member's container.
func MemberDataDir(m *v1alpha2.EtcdMember) string {
	sub := m.Annotations[AnnotationDataDirSubPath]
	if sub != "" && !strings.Contains(sub, "..") && subPathRE.MatchString(sub) {
		return DataDir + "/" + sub
	}
	return DataDir
}

// EtcdImage is the image of a member of the given version.
func EtcdImage(repository, version string) string {
	if repository == "" {
		repository = DefaultEtcdRepository
	}
	return repository + ":v" + version
}
