package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefragConcurrencyPolicy says what a due tick does while a run the policy
// made earlier has not finished.
// +kubebuilder:validation:Enum=Allow;Forbid
type DefragConcurrencyPolicy string

const (
	// DefragConcurrencyAllow makes the run anyway; the EtcdDefrag controller
	// runs one defragmentation per cluster at a time, so it waits its turn.
	DefragConcurrencyAllow DefragConcurrencyPolicy = "Allow"
	// DefragConcurrencyForbid skips the tick (the default).
	DefragConcurrencyForbid DefragConcurrencyPolicy = "Forbid"
)

// EtcdDefragPolicySpec asks for an EtcdDefrag of a cluster at every tick of
// a cron schedule.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || !self.schedule.contains('TZ=')",message="set the time zone either in spec.timeZone or as a CRON_TZ=/TZ= prefix of spec.schedule, not both"
type EtcdDefragPolicySpec struct {
	// ClusterRef names the EtcdCluster in the same namespace.
	ClusterRef corev1.LocalObjectReference `json:"clusterRef"`

	// Schedule in cron format: five fields (minute, hour, day of month,
	// month, day of week) or a descriptor such as @daily, in UTC unless
	// prefixed with CRON_TZ=<zone> or TZ=<zone>, or spec.timeZone is set.
	// A schedule that cannot be read is reported in the Active condition.
	// +kubebuilder:validation:MinLength=1
	Schedule string `json:"schedule"`

	// TimeZone of the schedule, an IANA name such as Europe/Berlin (an
	// addition to the reference API, the same as a CRON_TZ= prefix).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$`
	// +optional
	TimeZone *string `json:"timeZone,omitempty"`

	// Suspend stops new runs; runs already made go on.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// ConcurrencyPolicy: what a tick does while an earlier run has not
	// finished. Forbid (also when unset) skips the tick; Allow makes the
	// run, which waits for the earlier one.
	// +optional
	ConcurrencyPolicy DefragConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// StartingDeadlineSeconds: a tick missed by more than this (the
	// operator was down, or the policy suspended) is skipped. Unset: the
	// latest missed tick runs as soon as possible.
	// +kubebuilder:validation:Minimum=0
	// +optional
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// HistoryLimit is how many finished runs of the policy are kept, the
	// newest by completion. Unset leaves their deletion to
	// ttlSecondsAfterFinished.
	// +kubebuilder:validation:Minimum=0
	// +optional
	HistoryLimit *int32 `json:"historyLimit,omitempty"`

	// Rule is copied into every run; see EtcdDefrag.
	// +optional
	Rule *DefragRule `json:"rule,omitempty"`

	// TTLSecondsAfterFinished is copied into every run.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// EtcdDefragPolicyStatus is what the policy did last and does next.
type EtcdDefragPolicyStatus struct {
	// LastScheduleTime is the latest tick the policy handled, whether it
	// made a run or skipped the tick. The next run is for a later tick.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulTime is when the latest Complete run completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// NextScheduleTime is the next tick, unset while suspended or while
	// the schedule cannot be read (an addition to the reference API).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// Active are the runs of the policy that have not finished, by name.
	// +listType=atomic
	// +optional
	Active []corev1.LocalObjectReference `json:"active,omitempty"`
	// Conditions: Active (True while the policy schedules runs).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdDefragPolicy makes an EtcdDefrag of a cluster at every tick of a cron
// schedule and keeps a bounded history of them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdDefragPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EtcdDefragPolicySpec   `json:"spec"`
	Status EtcdDefragPolicyStatus `json:"status,omitempty"`
}

// EtcdDefragPolicyList is a list of EtcdDefragPolicy.
//
// +kubebuilder:object:root=true
type EtcdDefragPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdDefragPolicy `json:"items"`
}

func init() {
	register(&EtcdDefragPolicy{}, &EtcdDefragPolicyList{})
}
