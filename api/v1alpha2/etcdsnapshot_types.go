package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SnapshotPhase is where a snapshot is in its life.
// +kubebuilder:validation:Enum=Pending;Started;Complete;Failed
type SnapshotPhase string

// Snapshot phases. Complete and Failed are terminal.
const (
	SnapshotPending  SnapshotPhase = "Pending"
	SnapshotStarted  SnapshotPhase = "Started"
	SnapshotComplete SnapshotPhase = "Complete"
	SnapshotFailed   SnapshotPhase = "Failed"
)

// Snapshot compressions.
const (
	CompressionNone = "None"
	CompressionZstd = "Zstd"
)

// EtcdSnapshotSpec asks for one snapshot of a cluster. The rule that makes
// it immutable is on EtcdSnapshot's field, not on this type, so a schedule's
// snapshotTemplate, which embeds it, stays editable.
type EtcdSnapshotSpec struct {
	// ClusterRef names the EtcdCluster in the same namespace.
	ClusterRef corev1.LocalObjectReference `json:"clusterRef"`
	// Destination of the snapshot file.
	Destination SnapshotLocation `json:"destination"`
	// Verify proves the stored snapshot restorable: once it is stored, a
	// Job fetches it back from the destination, checks its checksum,
	// restores it with etcdutl of the etcd version it was taken from into
	// scratch space, and compares the restored revision, key count and
	// etcd's hash of the keys with what was recorded when it was taken.
	// The result is the Verified condition. Off by default: it reads the
	// whole snapshot back and needs scratch space of about twice its size.
	// +optional
	Verify bool `json:"verify,omitempty"`
	// ServiceAccountName runs the snapshot's Jobs (taking it, and verifying
	// it) as this ServiceAccount of the namespace, so that a workload
	// identity bound to it (EKS IRSA or Pod Identity, GKE or Azure Workload
	// Identity) gives the agent its object store credentials; leave
	// destination.s3.credentialsSecretRef unset then. The Kubernetes API
	// token stays unmounted. Default: the namespace's default account.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Compression of the stored file: None (the default: etcd's snapshot
	// as it is, <name>.db) or Zstd (<name>.db.zst, often a fraction of the
	// size). The checksum and size in status.artifact are the stored
	// file's; a restore and a verification recognise a compressed file by
	// its content and decompress it first.
	// +kubebuilder:validation:Enum=None;Zstd
	// +optional
	Compression string `json:"compression,omitempty"`
}

// SnapshotArtifact describes a stored snapshot.
type SnapshotArtifact struct {
	// URI of the snapshot: s3://bucket/key or file:///path.
	URI string `json:"uri"`
	// SizeBytes of the snapshot file.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Checksum is sha256:<hex> of the snapshot file.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// EtcdVersion is the version of the etcd member the snapshot was taken
	// from. A snapshot restores into that minor or a newer one.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Revision is etcd's revision read just before the snapshot was taken:
	// the snapshot holds it or a later one. KeyCount and KVHash are at it.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// KeyCount is how many keys the cluster held at revision.
	// +optional
	KeyCount *int64 `json:"keyCount,omitempty"`
	// KVHash is etcd's hash of its keys at revision (what etcdctl endpoint
	// hashkv prints), taken over the history kept since compactRevision.
	// +optional
	KVHash *int64 `json:"kvHash,omitempty"`
	// CompactRevision is the revision the cluster had compacted to when
	// KVHash was taken.
	// +optional
	CompactRevision int64 `json:"compactRevision,omitempty"`
}

// SnapshotVerification is what the verification of a stored snapshot
// found, read from the restored data.
type SnapshotVerification struct {
	// Checksum is the sha256:<hex> of the file read back.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// Revision is the revision of the restored data.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// KeyCount is how many keys the restored data holds at the artifact's
	// recorded revision (at its own revision when none was recorded).
	// +optional
	KeyCount int64 `json:"keyCount,omitempty"`
	// KVHash is etcd's hash of the restored keys at the same revision;
	// unset when it could not be compared (see Verified's message).
	// +optional
	KVHash *int64 `json:"kvHash,omitempty"`
	// EtcdVersion is the etcd release whose etcdutl restored the snapshot.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// StartTime is when the verification Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the verification passed or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// RetentionResult is what retention deleted after a scheduled snapshot.
type RetentionResult struct {
	// Pruned are the URIs of the stored snapshots deleted (the newest ones
	// when there were too many to list).
	// +optional
	Pruned []string `json:"pruned,omitempty"`
	// PrunedCount is how many stored snapshots were deleted.
	// +optional
	PrunedCount int32 `json:"prunedCount,omitempty"`
	// Error says what could not be deleted, and why.
	// +optional
	Error string `json:"error,omitempty"`
}

// EtcdSnapshotStatus is the progress of a snapshot.
type EtcdSnapshotStatus struct {
	// Phase of the snapshot.
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`
	// Artifact is set when the snapshot is Complete.
	// +optional
	Artifact *SnapshotArtifact `json:"artifact,omitempty"`
	// StartTime is when the snapshot Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the snapshot reached Complete or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Retention is what the schedule's retention did after this snapshot
	// was stored (scheduled snapshots only).
	// +optional
	Retention *RetentionResult `json:"retention,omitempty"`
	// Verification is what the verification found (spec.verify only).
	// +optional
	Verification *SnapshotVerification `json:"verification,omitempty"`
	// Conditions: Ready, and Verified (spec.verify only: Unknown while the
	// verification runs, then True or False for good).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdSnapshot is a one-shot snapshot of an etcd cluster to S3 or a PVC.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="Verified")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec asks for one snapshot of a cluster. It cannot change once
	// created: the status describes the snapshot this spec asked for.
	//
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable; create a new EtcdSnapshot instead"
	Spec   EtcdSnapshotSpec   `json:"spec"`
	Status EtcdSnapshotStatus `json:"status,omitempty"`
}

// EtcdSnapshotList is a list of EtcdSnapshot.
//
// +kubebuilder:object:root=true
type EtcdSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdSnapshot `json:"items"`
}

func init() {
	register(&EtcdSnapshot{}, &EtcdSnapshotList{})
}
