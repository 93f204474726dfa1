// Package report is the result an agent leaves in its container's
// termination message: the operator reads it from the Pod's status, so an
// agent needs no access to the Kubernetes API and its logs are never parsed.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Path is where a container's termination message is read from unless the
// Pod says otherwise.
const Path = "/dev/termination-log"

// maxBytes is what the kubelet keeps of a termination message; maxMessage
// is what a message keeps when the whole does not fit.
const (
	maxBytes   = 4096
	maxMessage = 1024
)

// Exit codes of the agents. A Job retries a transient failure and gives up at
// once on a permanent one (its Pod failure policy matches the code).
const (
	ExitTransient = 1
	ExitPermanent = 2
)

// Result is what an agent did. Reason is empty on success; otherwise it is
// a condition reason (CamelCase) and Message says what to do about it.
type Result struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	// URI, SizeBytes, Checksum and EtcdVersion describe a stored snapshot.
	URI         string `json:"uri,omitempty"`
	SizeBytes   int64  `json:"sizeBytes,omitempty"`
	Checksum    string `json:"checksum,omitempty"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Revision is etcd's revision just before the snapshot (for a
	// verification: of the restored data); KeyCount and KVHash are etcd's
	// count and hash of the keys at the revision recorded with the
	// snapshot, CompactRevision the compaction KVHash was taken after.
	Revision        int64   `json:"revision,omitempty"`
	KeyCount        *int64  `json:"keyCount,omitempty"`
	KVHash          *uint32 `json:"kvHash,omitempty"`
	CompactRevision int64   `json:"compactRevision,omitempty"`

	// Pruned are the stored snapshots retention deleted (the newest ones
	// when the list does not fit), PrunedCount how many in all.
	Pruned      []string `json:"pruned,omitempty"`
	PrunedCount int      `json:"prunedCount,omitempty"`
	// PruneError says why retention could not delete what it should have;
	// the snapshot itself succeeded.
	PruneError string `json:"pruneError,omitempty"`
}

// Failed reports whether the result is a failure.
func (r Result) Failed() bool { return r.Reason != "" }

// Encode renders the result in at most the bytes a termination message
// keeps: a long message is cut to 1 KiB first, then the pruned list, then
// the message further.
func (r Result) Encode() []byte {
	for {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Appendf(nil, `{"reason":"ReportUnencodable","message":%q}`, err.Error())
		}
		switch {
		case len(b) <= maxBytes:
			return b
		case len(r.Message) > maxMessage:
			r.Message = r.Message[:maxMessage]
		case len(r.Pruned) > 0:
			r.Pruned = r.Pruned[:len(r.Pruned)/2]
		case len(r.Message) > 0:
			r.Message = r.Message[:len(r.Message)/2]
		default:
			return b[:maxBytes]
		}
	}
}

// Write leaves the result at path.
func Write(path string, r Result) error {
	return os.WriteFile(path, r.Encode(), 0o644)
}

// Parse reads a termination message; ok is false when it is not a result
// (empty, or the kubelet's own words).
func Parse(msg string) (r Result, ok bool) {
	msg = strings.TrimSpace(msg)
	if !strings.HasPrefix(msg, "{") {
		return Result{}, false
	}
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return Result{}, false
	}
	return r, true
}
