package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdSnapshotScheduleSpec asks for snapshots of a cluster on a cron schedule,
// and for the old ones to be deleted.
//
// +kubebuilder:validation:XValidation:rule="!has(self.verifyEvery) || (has(self.snapshotTemplate.spec.verify) && self.snapshotTemplate.spec.verify)",message="verifyEvery needs snapshotTemplate.spec.verify: true (it says which of the snapshots are verified)"
type EtcdSnapshotScheduleSpec struct {
	// Schedule in cron format: five fields (minute, hour, day of month, month,
	// day of week), or one of @yearly, @annually, @monthly, @weekly, @daily,
	// @midnight, @hourly.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^\s@]+(\s+[^\s@]+){4})$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="schedule cannot carry TZ= or CRON_TZ=: set spec.timeZone instead"
	Schedule string `json:"schedule"`

	// TimeZone of the schedule, an IANA name such as Europe/Berlin. UTC when
	// unset.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$`
	// +optional
	TimeZone *string `json:"timeZone,omitempty"`

	// StartingDeadlineSeconds: a run missed (the operator was down, or the
	// previous snapshot still ran) by more than this is skipped. Unset: the
	// latest missed run is made as soon as possible. Missed runs are never
	// made more than once, however many slots were missed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// Suspend stops new snapshots; those running finish.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// SnapshotTemplate is what every snapshot is made from. Its destination's
	// S3 key or PVC subPath is the prefix or directory the snapshots go into.
	SnapshotTemplate EtcdSnapshotTemplate `json:"snapshotTemplate"`

	// VerifyEvery verifies every Nth snapshot the schedule makes (the first
	// one, then every Nth after it) when snapshotTemplate.spec.verify is
	// true; 1, the default, verifies every one. A verification reads the
	// whole snapshot back: on a frequent schedule of a large cluster, a
	// larger N keeps the cost down.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="verifyEvery must be 1 (verify every snapshot) or more (verify every Nth)"
	// +optional
	VerifyEvery *int32 `json:"verifyEvery,omitempty"`

	// SuccessfulSnapshotsHistoryLimit is how many Complete EtcdSnapshot
	// objects are kept. Deleting an EtcdSnapshot object never deletes its
	// stored snapshot; retention does.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +optional
	SuccessfulSnapshotsHistoryLimit *int32 `json:"successfulSnapshotsHistoryLimit,omitempty"`

	// FailedSnapshotsHistoryLimit is how many Failed EtcdSnapshot objects are
	// kept.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	FailedSnapshotsHistoryLimit *int32 `json:"failedSnapshotsHistoryLimit,omitempty"`

	// Retention deletes stored snapshots this schedule made: after each
	// successful snapshot, those beyond keepLast and those older than maxAge
	// (never the one just made, and never anything the schedule did not
	// write). Unset keeps every stored snapshot.
	// +optional
	Retention *SnapshotRetention `json:"retention,omitempty"`
}

// EtcdSnapshotTemplate is the EtcdSnapshot a schedule makes at each run.
type EtcdSnapshotTemplate struct {
	// Metadata adds labels and annotations to every snapshot.
	// +optional
	Metadata *TemplateMetadata `json:"metadata,omitempty"`
	// Spec of every snapshot.
	Spec EtcdSnapshotSpec `json:"spec"`
}

// TemplateMetadata is the part of an object's metadata a template may set.
type TemplateMetadata struct {
	// Labels to add.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations to add.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// SnapshotRetention says which stored snapshots of a schedule are kept.
//
// +kubebuilder:validation:XValidation:rule="has(self.keepLast) || has(self.maxAge)",message="retention: set keepLast, maxAge or both (or remove retention to keep every snapshot)"
type SnapshotRetention struct {
	// KeepLast keeps the newest this many stored snapshots.
	// +kubebuilder:validation:Minimum=1
	// +optional
	KeepLast *int32 `json:"keepLast,omitempty"`
	// MaxAge deletes stored snapshots older than this, a duration such as
	// 168h (a week) or 90m.
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	// +optional
	MaxAge string `json:"maxAge,omitempty"`
}

// EtcdSnapshotScheduleStatus is what the schedule did last and does next.
type EtcdSnapshotScheduleStatus struct {
	// LastScheduleTime is the slot of the latest snapshot made.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulTime is when the latest snapshot completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// NextScheduleTime is the next slot, unset while suspended.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// Active are the snapshots of the schedule that have not finished.
	// +optional
	Active []corev1.LocalObjectReference `json:"active,omitempty"`
	// LastSnapshot names the latest snapshot made.
	// +optional
	LastSnapshot string `json:"lastSnapshot,omitempty"`
	// SnapshotsMade counts the snapshots the schedule made; verifyEvery
	// picks the snapshots to verify by it.
	// +optional
	SnapshotsMade int64 `json:"snapshotsMade,omitempty"`
	// Conditions: Ready (the schedule is valid and runs), and
	// RetentionApplied (the last pruning of stored snapshots worked).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdSnapshotSchedule makes EtcdSnapshots of a cluster on a cron schedule
// and deletes the stored snapshots it made that fall out of its retention.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.snapshotTemplate.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Last Success",type=date,JSONPath=`.status.lastSuccessfulTime`
// +kubebuilder:printcolumn:name="Next Run",type=string,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdSnapshotSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   EtcdSnapshotScheduleSpec   `json:"spec"`
	Status EtcdSnapshotScheduleStatus `json:"status,omitempty"`
}

// EtcdSnapshotScheduleList is a list of EtcdSnapshotSchedule.
//
// +kubebuilder:object:root=true
type EtcdSnapshotScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdSnapshotSchedule `json:"items"`
}

func init() {
	register(&EtcdSnapshotSchedule{}, &EtcdSnapshotScheduleList{})
}
