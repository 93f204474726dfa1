// Package conditions names every condition type and reason the operator
// writes, so controllers, tests and docs agree on them.
package conditions

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// EtcdCluster condition types.
const (
	Available   = "Available"
	Progressing = "Progressing"
	Degraded    = "Degraded"
	// TLSHandover follows a move of spec.tls from own Secrets to
	// cert-manager; a cluster that never moved has none.
	TLSHandover = "TLSHandover"
)

// EtcdCluster reasons.
const (
	ReasonQuorumHealthy      = "QuorumHealthy"
	ReasonQuorumAvailable    = "QuorumAvailable"
	ReasonQuorumLost         = "QuorumLost"
	ReasonClusterDiscovered  = "ClusterDiscovered"
	ReasonClusterUnreachable = "ClusterUnreachable"
	ReasonPaused             = "Paused"
	ReasonBootstrapFailed    = "BootstrapFailed"
	ReasonDeadlineExceeded   = "DeadlineExceeded"
	ReasonInitialSnapshot    = "InitialSnapshot"
	ReasonSpecChanged        = "SpecChanged"
	ReasonRetryAfterDeadline = "RetryAfterDeadline"
	ReasonWaitingForSeed     = "WaitingForSeed"
	ReasonReconciled         = "Reconciled"
	ReasonMembersUnhealthy   = "MembersUnhealthy"
	ReasonBootstrapping      = "Bootstrapping"
	ReasonScalingUp          = "ScalingUp"
	ReasonScalingDown        = "ScalingDown"
	ReasonPausing            = "Pausing"
	ReasonResuming           = "Resuming"
	ReasonReplacingMember    = "ReplacingMember"
	ReasonRefused            = "QuorumProtection"
	ReasonWaitingForMembers  = "WaitingForMembers"
	ReasonPromotingLearner   = "PromotingLearner"
	ReasonRemovingStray      = "RemovingStrayMember"
	// ReasonNoLeader: no member that answers names a leader, for less
	// than the quorum-loss grace (an election, or the start of a loss).
	ReasonNoLeader = "NoLeader"
	// ReasonLeaderUnreachable: members follow a leader the operator cannot
	// reach: evidence of a quorum, reported apart from its loss.
	ReasonLeaderUnreachable = "LeaderUnreachable"
	// ReasonForceMarkRemoved: a survivor's mark no recovery record
	// authorizes was taken off a member (Events).
	ReasonForceMarkRemoved = "ForceMarkRemoved"
	// ReasonRecoveryPlanned: a recovery from quorum loss was planned (the
	// dry run) and waits for consent.
	ReasonRecoveryPlanned = "RecoveryPlanned"
	// ReasonRecoveringQuorum: a consented recovery from quorum loss is under
	// way.
	ReasonRecoveringQuorum = "RecoveringQuorum"
	// ReasonRecoveryRefused: a recovery was asked for and cannot be done.
	ReasonRecoveryRefused = "RecoveryRefused"
	// ReasonClusterIDMismatch: etcd answers with another cluster ID than
	// the one latched; no membership change is made.
	ReasonClusterIDMismatch = "ClusterIDMismatch"
	// ReasonAuthEnabled: etcd authentication was turned on, or the root
	// password applied (Events).
	ReasonAuthEnabled = "AuthEnabled"
	// ReasonEnablingAuth: the cluster converged and authentication is being
	// turned on.
	ReasonEnablingAuth = "EnablingAuth"
	// ReasonAuthRequiredNotConfigured (etcd checks credentials but the spec
	// gives none) and ReasonAuthCredentialsRejected (etcd refuses the root
	// password) are shared with snapshots (snapshot.go).
	// ReasonNotImplemented: the spec asks for something this operator
	// version does not do yet.
	ReasonNotImplemented = "NotImplemented"
	// ReasonRollingOut: members are being restarted (or replaced) one at a
	// time onto the latched target.
	ReasonRollingOut = "RollingOut"
	// ReasonVersionChangeRefused: the asked etcd version cannot be reached
	// from the running one; the message says what can.
	ReasonVersionChangeRefused = "VersionChangeRefused"
	// ReasonTakingSnapshotBefore: a changed spec waits for the snapshot
	// spec.snapshotBefore asks for before it.
	ReasonTakingSnapshotBefore = "TakingSnapshotBefore"
	// ReasonSnapshotBeforeFailed: that snapshot failed, or cannot be
	// taken; the change waits.
	ReasonSnapshotBeforeFailed = "SnapshotBeforeFailed"
	// ReasonRollOutStuck: a restarted member did not come back in time.
	ReasonRollOutStuck = "RollOutStuck"
	// ReasonCertManagerNotInstalled: the cluster's TLS is issued by
	// cert-manager, but the API server does not serve cert-manager.io/v1
	// Certificates; nothing of the cluster is created until it does.
	ReasonCertManagerNotInstalled = "CertManagerNotInstalled"
	// ReasonCertificateNotOwned: a Certificate of the name the operator
	// would create exists and is not the cluster's; it is left alone.
	ReasonCertificateNotOwned = "CertificateNotOwned"
	// ReasonAlarm: etcd raised an alarm (NOSPACE, CORRUPT); the message
	// says what it means and what to do.
	ReasonAlarm = "EtcdAlarm"
	// ReasonStepFailed: a step beside the membership changes (Services,
	// Certificates, the budget, the root password) failed; it is retried
	// and holds no membership change back.
	ReasonStepFailed = "StepFailed"
	// ReasonStorageTooSmall is a Warning Event: a memory-backed data
	// directory too small for etcd's write-ahead log and database quota.
	ReasonStorageTooSmall = "StorageTooSmall"
)

// EtcdMember condition types.
const (
	Ready          = "Ready"
	VersionDrifted = "VersionDrifted"
	// StorageResized is False while a member's claim grows to a larger
	// storage.size, or cannot; True once it has.
	StorageResized = "StorageResized"
	// Lost is True when the member cannot come back as itself (its tmpfs Pod
	// is gone, its data directory was lost, its node is gone); the cluster
	// controller replaces it when quorum allows.
	Lost = "Lost"
)

// EtcdMember reasons.
const (
	ReasonPodReady              = "PodReady"
	ReasonPodNotReady           = "PodNotReady"
	ReasonPending               = "Pending"
	ReasonDiscoveringMemberID   = "DiscoveringMemberID"
	ReasonVersionMatched        = "VersionMatched"
	ReasonVersionMismatch       = "VersionMismatch"
	ReasonPodLost               = "PodLost"
	ReasonDataDirLost           = "DataDirLost"
	ReasonNodeLost              = "NodeLost"
	ReasonNotLost               = "Running"
	ReasonRemovalRefused        = "RemovalRefused"
	ReasonResizing              = "Resizing"
	ReasonResized               = "Resized"
	ReasonExpansionNotSupported = "ExpansionNotSupported"
	// ReasonSecretMissing: a Secret the member mounts, or a key in it, does
	// not exist; the message names both. Also the cluster's reason while a
	// member waits for one.
	ReasonSecretMissing = "SecretMissing"

	// TLSHandover reasons: cert-manager has not written the new material
	// yet (True); members are being moved (True); a Certificate of the
	// operator's name is someone else's (False); every member runs the new
	// material alone (False).
	ReasonAwaitingMaterial = "AwaitingMaterial"
	ReasonRollingMembers   = "RollingMembers"
	ReasonHandoverBlocked  = "Blocked"
	ReasonHandoverComplete = "Complete"
)

// MembersApart is set on a cluster once two of its members shared a node:
// True when each runs on a node of its own again (spread.go in package
// cluster moves them apart).
const (
	MembersApart = "MembersApart"

	ReasonApart          = "Apart"
	ReasonSharingNode    = "SharingNode"
	ReasonMovingApart    = "MovingApart"
	ReasonNoNodeFits     = "NoNodeFits"
	ReasonMoveDidNotHelp = "MoveDidNotHelp"
)

// Set records a condition with the object's generation; the transition time
// (now, from the controller's clock) only moves when the status does.
func Set(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string, now time.Time) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// IsTrue reports whether the condition is present and True.
func IsTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// IsFalse reports whether the condition is present and False.
func IsFalse(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionFalse(conds, typ)
}

// Get returns the condition of the type, or nil.
func Get(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// Record emits an Event about obj: every membership change is one, and every
// refusal or failure is a Warning next to its condition.
func Record(rec events.EventRecorder, obj runtime.Object, warning bool, reason, action, format string, args ...any) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, typ, reason, action, format, args...)
}
