// Package dataguard keeps etcd from starting on a data directory that lost
// its write-ahead log under a member that had one.
//
// A member whose data directory was wiped, started again under its old
// member ID, can come back as itself: etcd asks its peers, the leader sends
// it a snapshot, and it serves again, having forgotten the votes it cast
// (raft's empty-disk hazard: it may vote twice in one term, and a quorum
// that counts it may elect two leaders). etcd lets this happen when the
// leader changed while the member was down or when the member is the newest
// one. The operator records a member's etcd ID once the member has run; from
// then on its data directory must hold a write-ahead log, and a member
// whose directory does not is lost and replaced as a new member.
//
// The guard runs as the etcd container's entrypoint (the operator's binary,
// copied into the Pod by an init container): it checks, and then becomes
// etcd (exec), so every start of the container is checked, including a
// restart in place after the volume was wiped under a running Pod.
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
)

// Refusal is the start of the line the guard exits with; the member
// controller reads it from the container's termination message.
const Refusal = "refusing to start etcd: the data directory has no write-ahead log"

// ErrNoWAL is returned when a member that ran has no write-ahead log.
var ErrNoWAL = errors.New(Refusal)

// Check returns ErrNoWAL (wrapped, with the details) when memberID is set and
// dataDir holds no write-ahead log file.
func Check(memberID, dataDir string) error {
	if memberID == "" {
		// Never ran: etcd creates its log on the first start.
		return nil
	}
	if dataDir == "" {
		return fmt.Errorf("%s is set but %s is not", EnvMemberID, EnvDataDir)
	}
	walDir := filepath.Join(dataDir, "member", "wal")
	entries, err := os.ReadDir(walDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", walDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".wal") {
			return nil
		}
	}
	return fmt.Errorf("%w (%s holds no .wal file) for member %s, which has run before: "+
		"its data was lost, and etcd would rejoin as that member having forgotten its votes; "+
		"the operator replaces it with a new member", ErrNoWAL, walDir, memberID)
}
