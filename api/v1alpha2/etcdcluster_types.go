package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Messages of the CEL rules on auth, exported so that tests and tools can match
// them.
const (
	MsgAuthRequiresClientTLS      = "auth.enabled requires tls.client: etcd would otherwise receive the root password in clear text"
	MsgAuthRequiresCredentialsRef = "auth.enabled requires auth.rootCredentialsSecretRef: name a kubernetes.io/basic-auth Secret holding the root password"
	MsgAuthAddRemove              = "auth cannot be added or removed after creation: create a new cluster (or restore a snapshot into one) to change it"
	MsgAuthImmutable              = "auth is immutable after creation: create a new cluster (or restore a snapshot into one) to change it"
)

// EtcdClusterSpec is the desired state of an etcd cluster.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.replicas) && self.replicas == 0 && has(self.storage) && has(self.storage.medium) && self.storage.medium == 'Memory')",message="replicas: 0 (pause) is not supported with storage.medium: Memory, because tmpfs data does not survive a pause; use PVC storage to pause a cluster"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(self.storage.medium) || self.storage.medium != 'Memory' || (has(self.storage.size) && quantity(string(self.storage.size)).isGreaterThan(quantity('0')))",message="storage.size must be greater than zero when storage.medium is Memory: it is the tmpfs size limit"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls)",message="tls cannot be added or removed after creation: create a new cluster to change transport security"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(oldSelf.tls) || has(self.tls.client) == has(oldSelf.tls.client)",message="tls.client cannot be added or removed after creation: create a new cluster to change transport security"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(oldSelf.tls) || has(self.tls.peer) == has(oldSelf.tls.peer)",message="tls.peer cannot be added or removed after creation: create a new cluster to change transport security"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(oldSelf.tls) || !has(self.tls.client) || self.tls.client == oldSelf.tls.client || (has(oldSelf.tls.client.serverSecretRef) && has(self.tls.client.certManager) && has(oldSelf.tls.client.operatorClientSecretRef) == has(self.tls.client.certManager.operatorClientIssuerRef))",message="spec.tls.client is immutable after creation, but for one hand-over from serverSecretRef to certManager that keeps the mTLS posture (certManager.operatorClientIssuerRef set if and only if operatorClientSecretRef was)"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(oldSelf.tls) || !has(self.tls.peer) || self.tls.peer == oldSelf.tls.peer || (has(oldSelf.tls.peer.secretRef) && has(self.tls.peer.certManager))",message="spec.tls.peer is immutable after creation, but for one hand-over from secretRef to certManager"
// +kubebuilder:validation:XValidation:rule="(has(self.storage) && has(self.storage.storageClassName)) == (has(oldSelf.storage) && has(oldSelf.storage.storageClassName))",message="storage.storageClassName cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="!(has(self.storage) && has(self.storage.storageClassName) && has(oldSelf.storage) && has(oldSelf.storage.storageClassName)) || self.storage.storageClassName == oldSelf.storage.storageClassName",message="storage.storageClassName is immutable after creation"
// +kubebuilder:validation:XValidation:rule="has(self.auth) == has(oldSelf.auth)",message="auth cannot be added or removed after creation: create a new cluster (or restore a snapshot into one) to change it"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(oldSelf.auth) || self.auth == oldSelf.auth",message="auth is immutable after creation: create a new cluster (or restore a snapshot into one) to change it"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.enabled) || !self.auth.enabled || (has(self.tls) && has(self.tls.client))",message="auth.enabled requires tls.client: etcd would otherwise receive the root password in clear text"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !has(self.auth.enabled) || !self.auth.enabled || has(self.auth.rootCredentialsSecretRef)",message="auth.enabled requires auth.rootCredentialsSecretRef: name a kubernetes.io/basic-auth Secret holding the root password"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap)",message="bootstrap cannot be added or removed after creation: it only applies when the cluster is first formed"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(oldSelf.bootstrap) || self.bootstrap == oldSelf.bootstrap",message="bootstrap is immutable after creation: it only applies when the cluster is first formed"
// +kubebuilder:validation:XValidation:rule="!(has(self.bootstrap) && has(self.bootstrap.restore) && has(self.storage) && has(self.storage.medium) && self.storage.medium == 'Memory')",message="bootstrap.restore is not supported with storage.medium: Memory; use PVC storage to restore a snapshot"
type EtcdClusterSpec struct {
	// Replicas is the number of etcd members. 0 pauses the cluster: the last
	// member goes dormant, keeping its volume and identity.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Version of etcd, such as 3.6.16. The image tag is v<version>.
	// +kubebuilder:validation:Pattern=`^\d+\.\d+\.\d+$`
	Version string `json:"version"`

	// Storage of every member's data directory.
	// +kubebuilder:default={size: "1Gi", medium: ""}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// SnapshotBefore takes a snapshot before each change it names and holds
	// the change until that snapshot is Complete: a failed snapshot holds it
	// (Progressing False, reason SnapshotBeforeFailed) until the snapshot is
	// deleted (the operator then takes it again) or the change is taken off
	// the list. A cluster whose members do not run (paused) is not
	// snapshotted.
	// +optional
	SnapshotBefore *SnapshotBeforeSpec `json:"snapshotBefore,omitempty"`

	// ProgressDeadlineSeconds bounds how long the operator works towards a
	// target before it reports DeadlineExceeded (or BootstrapFailed) and adopts a
	// newer spec if there is one.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// TLS of the client and peer planes. Immutable after creation, but for
	// the hand-over of a plane from own Secrets to cert-manager (see the
	// TLSHandover condition), which rolls the members without downtime.
	// +optional
	TLS *EtcdClusterTLS `json:"tls,omitempty"`

	// Auth turns on etcd authentication with a single root user. Immutable after
	// creation.
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// Bootstrap options, applied only when the cluster first forms. Immutable.
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// PodSettings: resources, metadata, scheduling, etcd options and pull
	// secrets of the member Pods.
	PodSettings `json:",inline"`
}

// EtcdClusterTLS configures transport security.
type EtcdClusterTLS struct {
	// Client is the client plane (port 2379).
	// +optional
	Client *ClientTLS `json:"client,omitempty"`
	// Peer is the peer plane (port 2380); always mutual TLS when set.
	// +optional
	Peer *PeerTLS `json:"peer,omitempty"`
}

// ClientTLS configures the client plane from own Secrets or cert-manager.
//
// +kubebuilder:validation:XValidation:rule="has(self.serverSecretRef) != has(self.certManager)",message="tls.client: set exactly one of serverSecretRef or certManager"
// +kubebuilder:validation:XValidation:rule="!(has(self.operatorClientSecretRef) && has(self.certManager))",message="tls.client: operatorClientSecretRef cannot be combined with certManager; use certManager.operatorClientIssuerRef instead"
type ClientTLS struct {
	// ServerSecretRef names a Secret with tls.crt, tls.key and ca.crt for the
	// etcd server.
	// +optional
	ServerSecretRef *corev1.LocalObjectReference `json:"serverSecretRef,omitempty"`
	// OperatorClientSecretRef names a Secret with tls.crt and tls.key that the
	// operator presents to etcd. Setting it turns on client certificate auth.
	// +optional
	OperatorClientSecretRef *corev1.LocalObjectReference `json:"operatorClientSecretRef,omitempty"`
	// CertManager issues the certificates instead.
	// +optional
	CertManager *ClientCertManager `json:"certManager,omitempty"`
}

// ClientCertManager issues client-plane certificates through cert-manager.
type ClientCertManager struct {
	// ServerIssuerRef signs the server certificate (Secret <cluster>-server-tls).
	ServerIssuerRef IssuerReference `json:"serverIssuerRef"`
	// OperatorClientIssuerRef signs the operator's client certificate (Secret
	// <cluster>-operator-client-tls). Setting it turns on client certificate auth.
	// +optional
	OperatorClientIssuerRef *IssuerReference `json:"operatorClientIssuerRef,omitempty"`
}

// PeerTLS configures the peer plane from an own Secret or cert-manager.
//
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.certManager)",message="tls.peer: set exactly one of secretRef or certManager"
// +kubebuilder:validation:XValidation:rule="!(has(self.allowedHostnames) && has(self.allowedCommonNames))",message="tls.peer: set at most one of allowedHostnames or allowedCommonNames; etcd accepts only one kind of peer identity"
type PeerTLS struct {
	// SecretRef names a Secret with tls.crt, tls.key and ca.crt.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// CertManager issues the peer certificate instead.
	// +optional
	CertManager *PeerCertManager `json:"certManager,omitempty"`
	// AllowedHostnames restricts who may speak raft to the members: etcd
	// accepts a peer only if its certificate is valid for one of these
	// names (--peer-cert-allowed-hostname), not merely signed by the CA.
	// With certManager and neither list set, the operator restricts peers
	// to the name peer.<cluster>.<namespace>.svc, which the certificate it
	// asks for covers and no other cluster's does. With secretRef and
	// neither list set, any certificate the CA signed is accepted.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	AllowedHostnames []string `json:"allowedHostnames,omitempty"`
	// AllowedCommonNames restricts peers to certificates with one of these
	// subject common names (--peer-cert-allowed-cn), for peer certificates
	// without DNS names.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	AllowedCommonNames []string `json:"allowedCommonNames,omitempty"`
}

// PeerCertManager issues the peer certificate through cert-manager.
type PeerCertManager struct {
	// IssuerRef signs the peer certificate (Secret <cluster>-peer-tls).
	IssuerRef IssuerReference `json:"issuerRef"`
}

// IssuerKind is the kind of a cert-manager issuer.
// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
type IssuerKind string

// IssuerReference names a cert-manager Issuer or ClusterIssuer.
type IssuerReference struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind of the issuer.
	// +kubebuilder:default=Issuer
	// +optional
	Kind IssuerKind `json:"kind,omitempty"`
}

// AuthSpec configures etcd authentication.
type AuthSpec struct {
	// Enabled turns on etcd auth with the single user root.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// RootCredentialsSecretRef names a kubernetes.io/basic-auth Secret whose
	// password key is the root password.
	// +optional
	RootCredentialsSecretRef *corev1.LocalObjectReference `json:"rootCredentialsSecretRef,omitempty"`
}

// BootstrapSpec configures how a cluster first forms.
type BootstrapSpec struct {
	// Restore seeds the first member's data directory from a snapshot.
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`
}

// RestoreSpec names the snapshot a new cluster is restored from.
//
// +kubebuilder:validation:XValidation:rule="!has(self.source.s3) || (has(self.source.s3.key) && size(self.source.s3.key) > 0)",message="bootstrap.restore.source.s3.key must name the snapshot object to restore"
// +kubebuilder:validation:XValidation:rule="!has(self.source.pvc) || (has(self.source.pvc.subPath) && size(self.source.pvc.subPath) > 0)",message="bootstrap.restore.source.pvc.subPath must name the snapshot file to restore"
type RestoreSpec struct {
	// Source of the snapshot.
	Source SnapshotLocation `json:"source"`
}

// ObservedClusterSpec is the target the operator has latched and works towards.
type ObservedClusterSpec struct {
	// Replicas latched from the spec.
	Replicas int32 `json:"replicas"`
	// Version latched from the spec.
	Version string `json:"version"`
	// Storage latched from the spec.
	Storage StorageSpec `json:"storage"`
	// PodSettings latched from the spec.
	PodSettings `json:",inline"`
}

// Each field of EtcdClusterStatus has one writer in the cluster controller,
// named in the line comment beside it (the table in
// internal/controller/cluster/status.go says more). Not part of the API's
// documentation: the blank line keeps it out.

// EtcdClusterStatus is the observed state of an etcd cluster.
type EtcdClusterStatus struct {
	// ReadyMembers counts the running voters that are healthy by etcd's own
	// report and serve clients.
	// +optional
	ReadyMembers int32 `json:"readyMembers,omitempty"` // writer: report, from the world
	// UpdatedMembers counts running members made from the latched target
	// (version, resources, options, scheduling, metadata, storage size) whose
	// Pods run it: during a roll-out, how far it has come.
	// +optional
	UpdatedMembers int32 `json:"updatedMembers,omitempty"` // writer: report, from the world
	// Selector selects the member Pods; it backs the /scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"` // writer: report
	// BrokenMembers counts members the operator found lost and is replacing.
	// +optional
	BrokenMembers int32 `json:"brokenMembers,omitempty"` // writer: report, from the world
	// ClusterVersion is etcd's cluster version (major.minor: the lowest
	// minor every member runs), read after version changes.
	// +optional
	ClusterVersion string `json:"clusterVersion,omitempty"` // writer: report, from etcd's reading; cleared by a start-over latch
	// ClusterID is etcd's cluster ID in 16-digit hex, latched once discovered.
	// +optional
	ClusterID string `json:"clusterID,omitempty"` // writer: latches
	// ClusterToken is the --initial-cluster-token, latched at first reconcile.
	// +optional
	ClusterToken string `json:"clusterToken,omitempty"` // writer: latches
	// AuthEnabled is latched true once etcd auth was enabled.
	// +optional
	AuthEnabled bool `json:"authEnabled,omitempty"` // writer: the auth step's outcome; cleared by a start-over latch
	// Observed is the latched target.
	// +optional
	Observed *ObservedClusterSpec `json:"observed,omitempty"` // writer: latches
	// ProgressDeadline is when work towards the latched target is given up.
	// Patch it into the past to escalate at once.
	// +optional
	ProgressDeadline *metav1.Time `json:"progressDeadline,omitempty"` // writer: latches
	// LastRollOut records the latest roll-out: members restarted one at a
	// time for a new target or changed certificate material.
	// +optional
	LastRollOut *RollOutStatus `json:"lastRollOut,omitempty"` // writer: the roll's outcomes (restart, completeRollOut)
	// Recovery is the plan and the progress of a recovery from quorum loss,
	// asked for with the annotation etcd-operator.cozystack.io/recover
	// (see RecoveryStatus).
	// +optional
	Recovery *RecoveryStatus `json:"recovery,omitempty"` // writer: report, from the plan
	// NoLeaderSince is when the operator first found, in an unbroken run
	// of passes, that no member whose etcd answers names a leader and no
	// voter it cannot reach has a Ready Pod. The quorum is called lost (and
	// a recovery may be planned) only once this has lasted the quorum-loss
	// grace; it is cleared as soon as any member names a leader.
	// +optional
	NoLeaderSince *metav1.Time `json:"noLeaderSince,omitempty"` // writer: report, from the world
	// LastReports are the last reports of each member's etcd the operator
	// had when the cluster became leaderless, kept while it stays so: what
	// a recovery plan knows of the members that no longer answer, even
	// after the operator restarted. Cleared once a member names a leader.
	// +listType=atomic
	// +optional
	LastReports []MemberReport `json:"lastReports,omitempty"` // writer: report, from the world
	// MaintenanceLock is the one lock between the cluster controller's
	// membership changes and member restarts and the defragmentation of a
	// member (an EtcdDefrag's Defragment call blocks that member for up to
	// minutes). The cluster controller is its only writer: it grants the
	// lock to the run that asks for it (the run's status.defragmenting) in a
	// pass that changes nothing and finds the cluster at rest, makes no
	// membership change and restarts no member while it is held, and takes
	// it back when the run no longer asks for it or is finished, or when
	// the lock expires (even if the run is gone: its call may still be in
	// progress). A request is granted only while it is fresh, so a run
	// that died holding the lock is not granted it again.
	// +optional
	MaintenanceLock *MaintenanceLock `json:"maintenanceLock,omitempty"` // writer: report (updateLock)
	// OperatorClientSecret is the Secret whose client certificate the
	// members trust the operator by (mutual TLS on the client plane). During
	// a TLS hand-over it stays the one from before, which members that have
	// not moved yet still require; the operator offers both.
	// +optional
	OperatorClientSecret string `json:"operatorClientSecret,omitempty"` // writer: report, from the world
	// LastMoveApart is the operator's last move of a member off a node it
	// shared with another member of the cluster: recorded before the member
	// is deleted, so that a move that did not place its replacement apart is
	// not made again until the nodes that fit change.
	// +optional
	LastMoveApart *MoveApart `json:"lastMoveApart,omitempty"` // writer: moveApart (act), then report
	// Conditions: Available, Progressing, Degraded, TLSHandover once the
	// cluster's TLS moved to cert-manager, and MembersApart once two of its
	// members shared a node.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"` // writer: report
}

// MaintenanceLock grants one EtcdDefrag the right to block one member
// until ExpiresAt (see EtcdClusterStatus.MaintenanceLock).
type MaintenanceLock struct {
	// Holder is the EtcdDefrag (in the cluster's namespace) the lock is
	// granted to.
	Holder string `json:"holder"`
	// Member is the EtcdMember the holder may defragment.
	Member string `json:"member"`
	// RequestedAt is the time of the holder's request this grant answers
	// (its status.defragmenting.since).
	RequestedAt metav1.Time `json:"requestedAt"`
	// GrantedAt is when the cluster controller granted the lock.
	GrantedAt metav1.Time `json:"grantedAt"`
	// ExpiresAt bounds the lock: after it the cluster controller no longer
	// honours it, and its holder starts no Defragment call under it.
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// Causes of a roll-out.
const (
	// RollOutCauseSpec: the version or a setting Pods are built from changed.
	RollOutCauseSpec = "Spec"
	// RollOutCauseSecrets: certificate material the members mount changed.
	RollOutCauseSecrets = "Secrets"
	// RollOutCauseTLSHandover: the cluster's TLS moved from own Secrets to
	// cert-manager (see the TLSHandover condition).
	RollOutCauseTLSHandover = "TLSHandover"
)

// RollOutStatus is a record of a roll-out.
type RollOutStatus struct {
	// Cause is what started it: Spec, Secrets or TLSHandover.
	Cause string `json:"cause"`
	// Message says what changed.
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when the first member was restarted.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when every member was up to date again.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Restarted lists the members restarted, in order.
	// +listType=atomic
	// +optional
	Restarted []string `json:"restarted,omitempty"`
}

// Phases of a recovery from quorum loss.
const (
	// RecoveryPlanned: the dry run's plan, waiting for consent (its token
	// in the annotation etcd-operator.cozystack.io/recover).
	RecoveryPlanned = "Planned"
	// RecoveryRefused: no recovery is possible as things are; the message
	// says why.
	RecoveryRefused = "Refused"
	// RecoveryNotNeeded: etcd has a leader and a quorum; nothing is done.
	RecoveryNotNeeded = "NotNeeded"
	// RecoveryFencing: the consented plan stops the discarded members (they
	// go dormant: no Pod) before the survivor is forced, so none of them
	// can serve under the old membership meanwhile; until the survivor is
	// marked, taking the consent back stops the recovery.
	RecoveryFencing = "Fencing"
	// RecoveryStopped: the consent was taken back (the annotation changed
	// or removed) or a member named a leader again before the survivor was
	// forced; the fenced members were woken and nothing was discarded.
	RecoveryStopped = "Stopped"
	// RecoveryForcingNewCluster: the survivor restarts with etcd's
	// --force-new-cluster, as the only member of the cluster.
	RecoveryForcingNewCluster = "ForcingNewCluster"
	// RecoveryRemovingLost: the survivor serves alone; the discarded members
	// are deleted.
	RecoveryRemovingLost = "RemovingLost"
	// RecoveryRebootstrapping: every member is gone; a new seed restores the
	// named snapshot and forms the cluster again (a new cluster ID).
	RecoveryRebootstrapping = "Rebootstrapping"
	// RecoveryRegrowing: new members join through the learner path until
	// the cluster has its desired size again.
	RecoveryRegrowing = "Regrowing"
	// RecoveryCompleted: the cluster is back at its desired size.
	RecoveryCompleted = "Completed"
)

// RecoveryStatus is a recovery from quorum loss: the plan the dry run
// reported, and once the plan's token was given back as consent, how far it
// has come. Every phase is written before the next step acts, so an operator
// restarted at any point goes on from the facts and this record.
type RecoveryStatus struct {
	// Phase: Planned, Refused, NotNeeded, Fencing, Stopped,
	// ForcingNewCluster, RemovingLost, Rebootstrapping, Regrowing or
	// Completed.
	Phase string `json:"phase"`
	// Request is the value of the annotation etcd-operator.cozystack.io/recover
	// this record answers ("dry-run", or a plan's token), so that a client
	// that set it knows the answer is to its request.
	// +optional
	Request string `json:"request,omitempty"`
	// Token identifies the plan, made at PlanTime: set the annotation
	// etcd-operator.cozystack.io/recover to it before ExpiryTime to carry
	// the plan out. It changes whenever the plan does, and with every new
	// plan time, so a token is good for this plan only, and only once: a
	// consent moves the record out of Planned, and no later plan has the
	// same token.
	// +optional
	Token string `json:"token,omitempty"`
	// Message says what the plan does, why it was refused, or where it is.
	// +optional
	Message string `json:"message,omitempty"`
	// Survivor is the member the cluster is rebuilt from: of the members
	// whose etcd answers, the voter with the highest applied index.
	// +optional
	Survivor *RecoveryMember `json:"survivor,omitempty"`
	// Snapshot is the EtcdSnapshot the cluster is rebuilt from, when the
	// annotation etcd-operator.cozystack.io/recover-from-snapshot names one
	// (then there is no survivor).
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// Restore is where the snapshot is read from, resolved when the plan
	// was made.
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`
	// Discarded are the other members: deleted with their volumes once the
	// survivor serves alone (from a snapshot: every member, first). Writes
	// only they applied are lost.
	// +listType=atomic
	// +optional
	Discarded []RecoveryMember `json:"discarded,omitempty"`
	// KeptClaims are the PersistentVolumeClaims of the discarded members
	// that the recovery keeps: released from their members (no owner, so
	// nothing deletes them), labelled etcd-operator.cozystack.io/discarded-from
	// with the cluster's name, for you to inspect and delete. Empty when the
	// annotation etcd-operator.cozystack.io/recover-discard-volumes is
	// "true": then they are deleted with their members.
	// +listType=atomic
	// +optional
	KeptClaims []string `json:"keptClaims,omitempty"`
	// PlanTime is when the plan was made.
	// +optional
	PlanTime *metav1.Time `json:"planTime,omitempty"`
	// ExpiryTime is when the plan's token stops being accepted; a plan
	// still asked for then is made again, with a new token.
	// +optional
	ExpiryTime *metav1.Time `json:"expiryTime,omitempty"`
	// StartTime is when the consented plan started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the cluster had its desired size again.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// MemberReport is what a member's etcd last said of itself.
type MemberReport struct {
	// Name of the EtcdMember.
	Name string `json:"name"`
	// AppliedIndex is the raft applied index it reported.
	AppliedIndex int64 `json:"appliedIndex"`
	// Time is when it reported it.
	Time metav1.Time `json:"time"`
}

// RecoveryMember is a member as a recovery plan sees it.
type RecoveryMember struct {
	// Name of the EtcdMember.
	Name string `json:"name"`
	// MemberID is etcd's member ID in 16-digit hex, when known.
	// +optional
	MemberID string `json:"memberID,omitempty"`
	// AppliedIndex is the raft applied index the member reported: now for
	// the survivor, the last the operator saw for a discarded member
	// (absent when it never saw one).
	// +optional
	AppliedIndex *int64 `json:"appliedIndex,omitempty"`
	// LastSeen is when the member last answered the operator.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// State says what the operator knows of it now ("answers, no leader",
	// "not answering", "lost: its volume was deleted").
	// +optional
	State string `json:"state,omitempty"`
}

// EtcdCluster is an etcd cluster run by the operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.readyMembers,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EtcdClusterSpec   `json:"spec"`
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdCluster.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}

func init() {
	register(&EtcdCluster{}, &EtcdClusterList{})
}

// SnapshotBeforeSpec says which changes wait for a snapshot, and where it goes.
// +kubebuilder:validation:XValidation:rule="has(self.scheduleRef) != has(self.destination)",message="snapshotBefore needs exactly one of scheduleRef and destination"
type SnapshotBeforeSpec struct {
	// Changes are the changes that wait for a snapshot: VersionChange (a
	// new spec.version), ScaleIn (fewer replicas, not 0) and Pause
	// (replicas 0).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	Changes []SnapshotBeforeChange `json:"changes"`
	// ScheduleRef names an EtcdSnapshotSchedule of the cluster: the
	// snapshot is made from its template, belongs to it, and is kept or
	// deleted by its retention like its own snapshots.
	// +optional
	ScheduleRef *corev1.LocalObjectReference `json:"scheduleRef,omitempty"`
	// Destination is where the snapshot goes, without a schedule; it is
	// kept until you delete it.
	// +optional
	Destination *SnapshotLocation `json:"destination,omitempty"`
}

// SnapshotBeforeChange is a change snapshotBefore can guard.
// +kubebuilder:validation:Enum=VersionChange;ScaleIn;Pause
type SnapshotBeforeChange string

// The changes snapshotBefore can guard.
const (
	SnapshotBeforeVersionChange SnapshotBeforeChange = "VersionChange"
	SnapshotBeforeScaleIn       SnapshotBeforeChange = "ScaleIn"
	SnapshotBeforePause         SnapshotBeforeChange = "Pause"
)

// MoveApart is a move of a member off a node it shared with other members
// of its cluster: the member is replaced, its replacement joining first.
type MoveApart struct {
	// Member is the member moved (deleted, then replaced).
	Member string `json:"member"`
	// Node is the node it shared.
	Node string `json:"node"`
	// Sharing is how many members shared a node with another before the
	// move.
	Sharing int32 `json:"sharing"`
	// FittingNodes are the nodes that held no member of the cluster and
	// that the member's Pod fitted (Ready, schedulable, taints tolerated,
	// node selector and required node affinity matched) before the move.
	// +optional
	FittingNodes []string `json:"fittingNodes,omitempty"`
	// Time is when the move started.
	Time metav1.Time `json:"time"`
}
