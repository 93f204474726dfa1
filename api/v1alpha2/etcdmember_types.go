package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdMemberSpec is what the operator decided about one etcd member. Everything
// but dormant and initialCluster is copied from the cluster's latched target
// when the member is created and never re-templated.
//
// The member's identity in etcd (its peer URL) derives from its name, its
// namespace, serviceName and tls, so those cannot change once set.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceName) || (has(self.serviceName) && self.serviceName == oldSelf.serviceName)",message="serviceName is part of the member's identity in etcd and cannot change once set"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || (has(self.tls.clientServerSecretRef) == has(oldSelf.tls.clientServerSecretRef) && (has(self.tls.peerSecretRef) || (has(self.tls.peerAutoTLS) && self.tls.peerAutoTLS)) == (has(oldSelf.tls.peerSecretRef) || (has(oldSelf.tls.peerAutoTLS) && oldSelf.tls.peerAutoTLS))))",message="tls on each plane is part of the member's identity in etcd (its URL scheme) and cannot be turned on or off; its Secrets may change (a TLS hand-over)"
type EtcdMemberSpec struct {
	// ClusterName is the owning EtcdCluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterName cannot change: a member belongs to the cluster that created it"
	ClusterName string `json:"clusterName"`

	// ServiceName is the headless Service the member's DNS names live under:
	// <member>.<serviceName>.<namespace>.svc. Set when the member is created
	// (the cluster's name, or the legacy Service of an adopted member) and
	// immutable after. When empty, the annotation
	// etcd-operator.cozystack.io/headless-service-name or the cluster name is
	// used, and the member controller records the result here.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`

	// Version of etcd this member runs.
	// +kubebuilder:validation:Pattern=`^\d+\.\d+\.\d+$`
	Version string `json:"version"`

	// Storage of the member's data directory.
	Storage StorageSpec `json:"storage"`

	// PodSettings of the member's Pod, copied from the cluster's latched
	// target; a change is rolled out.
	PodSettings `json:",inline"`

	// Bootstrap is true only on the seed member of a new cluster.
	// +optional
	Bootstrap bool `json:"bootstrap,omitempty"`

	// InitialCluster is etcd's --initial-cluster. Empty means the member is
	// pending: it is not yet known to etcd and no Pod is started.
	InitialCluster string `json:"initialCluster"`

	// ClusterToken is etcd's --initial-cluster-token.
	ClusterToken string `json:"clusterToken"`

	// Replicas backs the /scale subresource so that PodDisruptionBudgets can
	// resolve the member; it is always 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Dormant members of a paused cluster have no Pod; their PVC and identity
	// are kept.
	// +optional
	Dormant bool `json:"dormant,omitempty"`

	// TLS is the resolved transport security of the member.
	// +optional
	TLS *MemberTLS `json:"tls,omitempty"`

	// Restore is set only on the seed of a cluster restored from a snapshot.
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`
}

// MemberTLS is the member's view of the cluster's TLS, with Secret names
// resolved whether they are the user's own or issued by cert-manager.
type MemberTLS struct {
	// ClientServerSecretRef is the Secret with the client-plane server
	// certificate.
	// +optional
	ClientServerSecretRef *corev1.LocalObjectReference `json:"clientServerSecretRef,omitempty"`
	// ClientMTLS turns on client certificate auth.
	// +optional
	ClientMTLS bool `json:"clientMTLS,omitempty"`
	// PeerSecretRef is the Secret with the peer certificate.
	// +optional
	PeerSecretRef *corev1.LocalObjectReference `json:"peerSecretRef,omitempty"`
	// TrustedCASecretRef, set by the operator only during a TLS hand-over,
	// names a Secret whose client-ca.crt and peer-ca.crt the member trusts
	// instead of the ca.crt of its certificate Secrets: the CAs of both the
	// material it leaves and the material it moves to.
	// +optional
	TrustedCASecretRef *corev1.LocalObjectReference `json:"trustedCASecretRef,omitempty"`
	// PeerAutoTLS runs the peer plane with etcd's --peer-auto-tls (adopted
	// legacy clusters only).
	// +optional
	PeerAutoTLS bool `json:"peerAutoTLS,omitempty"`
	// PeerAllowedHostnames are the names one of which a peer's certificate
	// must be valid for (see PeerTLS.AllowedHostnames).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	PeerAllowedHostnames []string `json:"peerAllowedHostnames,omitempty"`
	// PeerAllowedCommonNames are the common names one of which a peer's
	// certificate must carry (see PeerTLS.AllowedCommonNames).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	PeerAllowedCommonNames []string `json:"peerAllowedCommonNames,omitempty"`
}

// EtcdMemberStatus is what the member controller observed.
type EtcdMemberStatus struct {
	// MemberID is etcd's member ID in 16-digit hex.
	// +optional
	MemberID string `json:"memberID,omitempty"`
	// PodName of the member's Pod.
	// +optional
	PodName string `json:"podName,omitempty"`
	// PodUID of the member's Pod.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// IsVoter is true when etcd lists the member as a voter, not a learner.
	// +optional
	IsVoter bool `json:"isVoter,omitempty"`
	// Replicas is 1 when the Pod exists; it backs the /scale subresource.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Selector selects the member's Pod; it backs the /scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// PVCName of the member's data volume, empty for tmpfs members.
	// +optional
	PVCName string `json:"pvcName,omitempty"`
	// Version of etcd the member reports running.
	// +optional
	Version string `json:"version,omitempty"`
	// Conditions: Ready, VersionDrifted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdMember is one etcd member, created by the operator. It owns the member's
// Pod and PVC.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Running",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdMember struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EtcdMemberSpec   `json:"spec"`
	Status EtcdMemberStatus `json:"status,omitempty"`
}

// EtcdMemberList is a list of EtcdMember.
//
// +kubebuilder:object:root=true
type EtcdMemberList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdMember `json:"items"`
}

func init() {
	register(&EtcdMember{}, &EtcdMemberList{})
}
