// Package dataguard keeps etcd from starting on a data directory that lost
// its write-ahead log under a member that had one, or whose log or backend
// is damaged past what etcd can start on.
//
// A member whose data directory was wiped, started again under its old
// member ID, can come back as itself: etcd asks its peers, the leader sends
// it a snapshot, and it serves again, having forgotten the votes it cast
// (raft's empty-disk hazard: it may vote twice in one term, and a quorum
// that counts it may elect two leaders). etcd lets this happen when the
// leader changed while the member was down or when the member is the newest
// one. The operator records a member's etcd ID once the member has run; from
// then on its data directory must hold a write-ahead log, and a member
// whose directory does not is lost and replaced as a new member. So is one
// whose directory holds a log and a backend etcd cannot start on (a file
// overwritten in place, the backend deleted or cut short: see damage):
// etcd would exit at every start with a message of its own, and the
// member would crash-loop instead of being replaced.
//
// The member ID reaches the Pod only after the member's etcd first ran (it
// is what etcd reports), so a container restarted in the seconds after a
// join, its volume wiped, may not have it yet. The guard therefore also
// leaves a mark in a directory that lives as long as the Pod (an emptyDir)
// once it has seen a write-ahead log there, at a start or while etcd runs:
// from then on a start without a log is refused whatever the member ID
// says. A start that finds none while no log was ever seen lets etcd run:
// etcd may exit before it writes its first log (a joining member that
// cannot reach its peers yet), and the restarts that follow are first
// starts too.
//
// The guard runs as the etcd container's entrypoint (the operator's binary,
// copied into the Pod by an init container): it checks, then runs etcd as
// its child, passing signals on and ending with etcd's exit code, so every
// start of the container is checked, including a restart in place after
// the volume was wiped under a running Pod.
package dataguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment of the guard, set by the Pod builder.
const (
	// EnvMemberID is the member's recorded etcd ID (from a Pod annotation,
	// read at every container start); empty for a member that has not run.
	EnvMemberID = "ETCD_GUARD_MEMBER_ID"
	// EnvDataDir is etcd's --data-dir.
	EnvDataDir = "ETCD_GUARD_DATA_DIR"
	// EnvStateDir is a directory that lives as long as the Pod, where the
	// guard marks that a start found a log; empty in Pods of older
	// operators.
	EnvStateDir = "ETCD_GUARD_STATE_DIR"
)

// walSeenMark is the file in the state directory that says a start in
// this Pod found a write-ahead log.
const walSeenMark = "etcd-log-seen"

// Guard checks a start of etcd: refused (ErrNoWAL) when the data directory
// has no write-ahead log and either the member has run (memberID set) or a
// start in this Pod found a log before (the mark in stateDir). A start that
// finds a log marks it; one that finds none (a member whose etcd has not
// written its log yet) lets etcd run.
func Guard(memberID, dataDir, stateDir string) error {
	mark := ""
	if stateDir != "" {
		mark = filepath.Join(stateDir, walSeenMark)
		if _, err := os.Stat(mark); err == nil && memberID == "" {
			memberID = "(its log was seen in this Pod before)"
		}
	}
	if err := Check(memberID, dataDir); err != nil {
		return err
	}
	if mark == "" || dataDir == "" {
		return nil
	}
	found, err := hasWAL(dataDir)
	if err != nil || !found {
		return err
	}
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		return fmt.Errorf("marking the log seen in %s: %w", stateDir, err)
	}
	return nil
}

// Refusal is the start of the line the guard exits with when the log is
// gone; the member controller reads it from the container's termination
// message.
const Refusal = "refusing to start etcd: the data directory has no write-ahead log"

// RefusalDamaged is the start of the line the guard exits with when the log
// or the backend is there but etcd cannot start on it (see damage).
const RefusalDamaged = "refusing to start etcd: the data directory is damaged"

// ErrNoWAL is returned when a member that ran has no write-ahead log.
var ErrNoWAL = errors.New(Refusal)

// ErrDamaged is returned when a member that ran has a log or backend etcd
// cannot start on.
var ErrDamaged = errors.New(RefusalDamaged)

// Check returns ErrNoWAL (wrapped, with the details) when memberID is set and
// dataDir holds no write-ahead log file, and ErrDamaged when it holds one
// but a log file does not begin as etcd writes them or the backend is
// missing or not a usable bbolt file (see damage). A member that never ran
// (memberID empty) is not checked: etcd makes both on its first start.
func Check(memberID, dataDir string) error {
	if memberID == "" {
		// Never ran: etcd creates its log on the first start.
		return nil
	}
	if dataDir == "" {
		return fmt.Errorf("%s is set but %s is not", EnvMemberID, EnvDataDir)
	}
	found, err := hasWAL(dataDir)
	if err != nil {
		return err
	}
	if !found {
		walDir := filepath.Join(dataDir, "member", "wal")
		return fmt.Errorf("%w (%s holds no .wal file) for member %s, which has run before: "+
			"its data was lost, and etcd would rejoin as that member having forgotten its votes; "+
			"the operator replaces it with a new member", ErrNoWAL, walDir, memberID)
	}
	problem, err := damage(dataDir)
	if err != nil || problem == "" {
		return err
	}
	return fmt.Errorf("%w (%s) for member %s, which has run before: etcd cannot start on it; "+
		"the operator replaces it with a new member", ErrDamaged, problem, memberID)
}

// hasWAL reports whether dataDir holds a write-ahead log file.
func hasWAL(dataDir string) (bool, error) {
	walDir := filepath.Join(dataDir, "member", "wal")
	entries, err := os.ReadDir(walDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", walDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".wal") {
			return true, nil
		}
	}
	return false, nil
}
