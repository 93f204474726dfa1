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

// EtcdSnapshotSpec asks for one snapshot of a cluster. The rule that makes
// it immutable is on EtcdSnapshot's field, not on this type, so a schedule's
// snapshotTemplate, which embeds it, stays editable.
type EtcdSnapshotSpec struct {
	// ClusterRef names the EtcdCluster in the same namespace.
	ClusterRef corev1.LocalObjectReference `json:"clusterRef"`
	// Destination of the snapshot file.
	Destination SnapshotLocation `json:"destination"`
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
	// Conditions: Ready.
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
