package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefragPhase is where a defragmentation is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Complete;Failed
type DefragPhase string

// Defragmentation phases. Complete and Failed are terminal.
const (
	DefragPending  DefragPhase = "Pending"
	DefragRunning  DefragPhase = "Running"
	DefragComplete DefragPhase = "Complete"
	DefragFailed   DefragPhase = "Failed"
)

// EtcdDefragSpec asks for the defragmentation of a cluster's members.
type EtcdDefragSpec struct {
	// ClusterRef names the EtcdCluster in the same namespace.
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0",message="clusterRef.name must name the EtcdCluster to defragment"
	ClusterRef corev1.LocalObjectReference `json:"clusterRef"`
	// Rule decides which members are defragmented. Unset uses the default gate:
	// free space above 200Mi.
	// +optional
	Rule *DefragRule `json:"rule,omitempty"`
	// TTLSecondsAfterFinished deletes the request this long after it finished.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// DefragRule selects the members worth defragmenting.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.all) && self.all) || (!has(self.freeSpaceAbove) && !has(self.quotaUsageAbove) && !has(self.minReclaim))",message="rule.all: true defragments every member and cannot be combined with freeSpaceAbove, quotaUsageAbove or minReclaim"
// +kubebuilder:validation:XValidation:rule="!has(self.freeSpaceAbove) || quantity(string(self.freeSpaceAbove)).isGreaterThan(quantity('0'))",message="rule.freeSpaceAbove must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.minReclaim) || quantity(string(self.minReclaim)).isGreaterThan(quantity('0'))",message="rule.minReclaim must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.minReclaim) || has(self.quotaUsageAbove)",message="rule.minReclaim only applies together with rule.quotaUsageAbove: set quotaUsageAbove or remove minReclaim"
// +kubebuilder:validation:XValidation:rule="!(has(self.minReclaim) && has(self.freeSpaceAbove)) || quantity(string(self.minReclaim)).compareTo(quantity(string(self.freeSpaceAbove))) <= 0",message="rule.minReclaim cannot be larger than rule.freeSpaceAbove"
type DefragRule struct {
	// All defragments every member regardless of free space.
	// +optional
	All bool `json:"all,omitempty"`
	// FreeSpaceAbove defragments a member whose reclaimable space exceeds it
	// (default 200Mi).
	// +optional
	FreeSpaceAbove *resource.Quantity `json:"freeSpaceAbove,omitempty"`
	// QuotaUsageAbove defragments a member whose database uses more than this
	// share of its quota, such as "80%".
	// +kubebuilder:validation:Pattern=`^([1-9][0-9]?|100)%$`
	// +optional
	QuotaUsageAbove string `json:"quotaUsageAbove,omitempty"`
	// MinReclaim is the least reclaimable space that makes a quota-driven
	// defragmentation worth it (default 32Mi).
	// +optional
	MinReclaim *resource.Quantity `json:"minReclaim,omitempty"`
}

// DefragMemberRole is a member's raft role when it was considered.
// +kubebuilder:validation:Enum=leader;follower
type DefragMemberRole string

// Member roles.
const (
	DefragRoleLeader   DefragMemberRole = "leader"
	DefragRoleFollower DefragMemberRole = "follower"
)

// DefragOutcome is what happened to one member.
// +kubebuilder:validation:Enum=Pending;Skipped;Defragmented;Failed
type DefragOutcome string

// Member outcomes. Pending is the only one that is not final.
const (
	DefragOutcomePending      DefragOutcome = "Pending"
	DefragOutcomeSkipped      DefragOutcome = "Skipped"
	DefragOutcomeDefragmented DefragOutcome = "Defragmented"
	DefragOutcomeFailed       DefragOutcome = "Failed"
)

// DefragMemberStatus is the outcome for one member.
type DefragMemberStatus struct {
	// Name of the EtcdMember.
	Name string `json:"name"`
	// Role of the member.
	// +optional
	Role DefragMemberRole `json:"role,omitempty"`
	// Outcome for the member.
	// +optional
	Outcome DefragOutcome `json:"outcome,omitempty"`
	// Reason explains the outcome.
	// +optional
	Reason string `json:"reason,omitempty"`
	// DBSizeBefore in bytes.
	// +optional
	DBSizeBefore int64 `json:"dbSizeBefore,omitempty"`
	// DBSizeAfter in bytes.
	// +optional
	DBSizeAfter int64 `json:"dbSizeAfter,omitempty"`
	// ReclaimedBytes by the defragmentation.
	// +optional
	ReclaimedBytes int64 `json:"reclaimedBytes,omitempty"`
	// FinishedAt is when the member was done.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// DefragRequest names the member a run is about to block, and since when
// it asks.
type DefragRequest struct {
	// Member is the EtcdMember.
	Member string `json:"member"`
	// Since is when the run asked; a new request has a new time.
	Since metav1.Time `json:"since"`
}

// EtcdDefragStatus is the progress of a defragmentation.
type EtcdDefragStatus struct {
	// Phase of the request.
	// +optional
	Phase DefragPhase `json:"phase,omitempty"`
	// StartedAt is when work began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// CompletedAt is when the request reached a terminal phase.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// Defragmented counts members defragmented.
	// +optional
	Defragmented int32 `json:"defragmented,omitempty"`
	// Defragmenting is the member this run defragments now, or asks to
	// defragment next: set before its Defragment call, cleared once the
	// call returned or the run waits. It is the run's request for the
	// EtcdCluster's status.maintenanceLock; the run calls Defragment only
	// while the cluster grants it that lock for this member. Written by the
	// defrag controller only.
	// +optional
	Defragmenting *DefragRequest `json:"defragmenting,omitempty"`
	// Members holds one entry per member considered.
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []DefragMemberStatus `json:"members,omitempty"`
	// Conditions of the request.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdDefrag is a request to defragment the members of a cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Defragmented",type=integer,JSONPath=`.status.defragmented`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdDefrag struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EtcdDefragSpec   `json:"spec"`
	Status EtcdDefragStatus `json:"status,omitempty"`
}

// EtcdDefragList is a list of EtcdDefrag.
//
// +kubebuilder:object:root=true
type EtcdDefragList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdDefrag `json:"items"`
}

func init() {
	register(&EtcdDefrag{}, &EtcdDefragList{})
}
