package conditions

// EtcdDefrag's one condition, DefragChecked, and its reasons (the
// reference API's, plus ReasonClusterBusy). ReasonClusterNotFound and
// ReasonDeadlineExceeded are shared with the other kinds.
const (
	DefragChecked = "DefragChecked"
	// ReasonQueued: an older run for the same cluster has not finished.
	ReasonQueued = "Queued"
	// ReasonClusterNotHealthy: etcd's own view of the cluster failed the
	// health gate; the run waits.
	ReasonClusterNotHealthy = "ClusterNotHealthy"
	// ReasonClusterBusy: the EtcdCluster is changing its membership, rolling
	// out or otherwise not at rest; the run waits.
	ReasonClusterBusy = "ClusterBusy"
	// ReasonDefragRunning: a member is being worked on.
	ReasonDefragRunning = "Running"
	// ReasonDefragComplete: every member was defragmented or skipped.
	ReasonDefragComplete = "Complete"
	// ReasonMemberFailed: the run finished with at least one member failed.
	ReasonMemberFailed = "MemberFailed"
	// ReasonWaitingForDefrag (the EtcdCluster's Progressing): a membership
	// change or a restart waits for the maintenance lock a defragmentation
	// holds on a member.
	ReasonWaitingForDefrag = "WaitingForDefrag"
)
