package conditions

// EtcdDefragPolicy condition type and reasons. The policy shares Scheduled,
// Suspended, InvalidSchedule, InvalidTimeZone and MissedSchedule with the
// snapshot schedule (snapshot.go).
const (
	// Active is True while the policy makes runs on its schedule.
	Active = "Active"
	// ReasonRunRejected: the API server refused the EtcdDefrag made from the
	// policy (an empty spec.clusterRef.name, say); the message carries its
	// answer.
	ReasonRunRejected = "RunRejected"
)

// EtcdDefragPolicy Event reasons (besides MissedSchedule).
const (
	// ReasonStampedRun: the policy made a run.
	ReasonStampedRun = "StampedRun"
	// ReasonConcurrencyForbidden: a tick was skipped because a run had not
	// finished and concurrencyPolicy is Forbid.
	ReasonConcurrencyForbidden = "ConcurrencyForbidden"
)
