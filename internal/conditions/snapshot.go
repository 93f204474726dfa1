package conditions

// EtcdSnapshot reasons of its Ready condition (True only when Complete).
const (
	ReasonJobCreated                 = "JobCreated"
	ReasonJobRunning                 = "JobRunning"
	ReasonSnapshotStored             = "SnapshotStored"
	ReasonOperatorImageNotConfigured = "OperatorImageNotConfigured"
	ReasonClusterNotFound            = "ClusterNotFound"
	ReasonAuthLatchTimeout           = "AuthLatchTimeout"
	ReasonSnapshotJobLost            = "SnapshotJobLost"
	ReasonJobFailed                  = "JobFailed"
	// ReasonWaitingForCluster: the cluster has not formed yet; the snapshot
	// starts once it has.
	ReasonWaitingForCluster = "WaitingForCluster"
	// ReasonTLSHandoverTimeout: the cluster's TLS hand-over did not
	// complete in time (the agent trusts only the new material).
	ReasonTLSHandoverTimeout = "TLSHandoverTimeout"
	// ReasonClusterNotFormed: the cluster did not form in time.
	ReasonClusterNotFormed = "ClusterNotFormed"
	// ReasonPVCNotFound: the destination (or restore source) claim does not exist.
	ReasonPVCNotFound = "PVCNotFound"
	// ReasonCredentialsSecretNotFound: the S3 credentials Secret does not
	// exist; ReasonCredentialsSecretInvalid: it lacks a key.
	ReasonCredentialsSecretNotFound = "CredentialsSecretNotFound"
	ReasonCredentialsSecretInvalid  = "CredentialsSecretInvalid"
	// ReasonJobNameTaken: a Job of the snapshot's Job name belongs to
	// something else.
	ReasonJobNameTaken = "JobNameTaken"
)

// Reasons an agent reports in its result, for a snapshot (the snapshot's
// Failed reason) or a restore (in the seed member's Ready message).
const (
	// ReasonS3CredentialsRejected: the store does not know the access key or
	// the secret key does not match it.
	ReasonS3CredentialsRejected = "S3CredentialsRejected"
	// ReasonS3AccessDenied: the credentials are valid but may not do this.
	ReasonS3AccessDenied = "S3AccessDenied"
	// ReasonS3EncryptionRefused: the store refused the server-side
	// encryption asked of it (no KMS, no such key, no right to use it, or
	// a customer key that is not the object's).
	ReasonS3EncryptionRefused = "S3EncryptionRefused"
	// ReasonBucketNotFound: the bucket does not exist.
	ReasonBucketNotFound = "BucketNotFound"
	// ReasonStorageUnreachable: the object store did not answer.
	ReasonStorageUnreachable = "StorageUnreachable"
	// ReasonS3CertificateNotTrusted: the store's TLS certificate is not
	// signed by a CA the agent trusts (the public roots, and the location's
	// caSecretRef).
	ReasonS3CertificateNotTrusted = "S3CertificateNotTrusted"
	// ReasonStorageError: the store answered with an error not listed here.
	ReasonStorageError = "StorageError"
	// ReasonStorageFull: no space left on the destination volume.
	ReasonStorageFull = "StorageFull"
	// ReasonSnapshotExists: the destination holds an object or file that
	// another snapshot wrote; it is never overwritten.
	ReasonSnapshotExists = "SnapshotExists"
	// ReasonInvalidDestination: the endpoint, key or subPath cannot be used.
	ReasonInvalidDestination = "InvalidDestination"
	// ReasonSnapshotStreamFailed: etcd's snapshot stream broke off.
	ReasonSnapshotStreamFailed = "SnapshotStreamFailed"
	// ReasonAuthRequiredNotConfigured: etcd has authentication on and no
	// credentials were given; ReasonAuthCredentialsRejected: they were
	// refused. (The reference reports the same reasons on EtcdCluster.)
	ReasonAuthRequiredNotConfigured = "AuthRequiredNotConfigured"
	ReasonAuthCredentialsRejected   = "AuthCredentialsRejected"
	// ReasonAgentMisconfigured: the agent's environment is incomplete (a bug
	// of the operator, or a hand-made Job).
	ReasonAgentMisconfigured = "AgentMisconfigured"
	// ReasonRetentionFailed (on a schedule's RetentionApplied condition):
	// stored snapshots that fell out of retention could not be deleted.
	ReasonRetentionFailed = "RetentionFailed"
)

// Restore reasons.
const (
	// ReasonRestoreFailed is the seed member's Ready reason while its
	// restore fails; the message carries the agent's reason.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoring: the seed's data directory is being restored.
	ReasonRestoring             = "Restoring"
	ReasonSnapshotNotFound      = "SnapshotNotFound"
	ReasonChecksumMismatch      = "ChecksumMismatch"
	ReasonSnapshotCorrupt       = "SnapshotCorrupt"
	ReasonSnapshotFromNewerEtcd = "SnapshotFromNewerEtcd"
	ReasonInsufficientSpace     = "InsufficientSpace"
	ReasonDataDirNotEmpty       = "DataDirNotEmpty"
	ReasonRestoreToolNotFound   = "EtcdutlNotFound"
)

// EtcdSnapshotSchedule condition types and reasons.
const (
	// RetentionApplied is True when the last pruning of stored snapshots
	// deleted everything it should have.
	RetentionApplied = "RetentionApplied"

	ReasonScheduled       = "Scheduled"
	ReasonSuspended       = "Suspended"
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonInvalidTimeZone = "InvalidTimeZone"
	ReasonInvalidMaxAge   = "InvalidMaxAge"
	ReasonRetentionDone   = "Pruned"
	ReasonMissedSchedule  = "MissedSchedule"
)

// EtcdSnapshot's Verified condition (spec.verify only) and its reasons.
// The agent reports ArtifactMissing, Mismatch and RestoreFailed itself;
// anything else that stops a verification is VerificationFailed, with the
// cause in the message.
const (
	Verified = "Verified"

	// ReasonVerificationRunning (Unknown): the verification Job runs.
	ReasonVerificationRunning = "VerificationRunning"
	// ReasonVerificationPassed (True): the snapshot was read back intact,
	// restored, and holds what was recorded when it was taken.
	ReasonVerificationPassed = "VerificationPassed"
	// ReasonArtifactMissing: the stored snapshot is gone from its location.
	ReasonArtifactMissing = "ArtifactMissing"
	// ReasonMismatch: the file read back, or the data restored from it,
	// differs from what was recorded (checksum, size, etcd's own integrity
	// hash, revision, key count or hash of the keys).
	ReasonMismatch = "Mismatch"
	// ReasonVerificationFailed: the verification could not be carried out
	// (the store did not answer, the Job failed or was deleted).
	ReasonVerificationFailed = "VerificationFailed"
)
