package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The identity the verification restores under: the restored data is
// never started, so any single-member cluster does.
const (
	verifyMember  = "verify"
	verifyPeerURL = "http://localhost:2380"
)

// VerifySnapshot proves a stored snapshot restorable: it reads it back from
// where it is stored, checks it against the checksum and size recorded when
// it was taken, restores it with etcdutl into the scratch directory (which
// checks etcd's own integrity hash), and compares the restored keys with the
// revision, key count and hash recorded then. Nothing is started on the
// restored data; it is read through etcd's storage packages, then removed.
func VerifySnapshot(ctx context.Context, cfg VerifyConfig, log *slog.Logger) (report.Result, int) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
		return failure(verificationError(fileError(err, "creating "+cfg.ScratchDir)), conditions.ReasonVerificationFailed)
	}
	if err := clearStaging(cfg.ScratchDir); err != nil {
		return failure(verificationError(err), conditions.ReasonVerificationFailed)
	}
	res, err := verifySnapshot(ctx, cfg, log)
	if cerr := clearStaging(cfg.ScratchDir); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return failure(verificationError(err), conditions.ReasonVerificationFailed)
	}
	return res, 0
}

func verifySnapshot(ctx context.Context, cfg VerifyConfig, log *slog.Logger) (report.Result, error) {
	if err := findEtcdutl(cfg.Etcdutl); err != nil {
		return report.Result{}, err
	}
	src, err := findSource(ctx, cfg.Source)
	if err != nil {
		return report.Result{}, err
	}
	uri := src.st.URI(src.file)
	if err := expectFile(src, cfg.Expect, uri); err != nil {
		return report.Result{}, err
	}
	log.Info("Reading the snapshot back", "from", uri, "bytes", src.size)
	file, err := fetch(ctx, cfg.ScratchDir, src)
	if err != nil {
		return report.Result{}, err
	}
	if file, err = decompressed(ctx, file, cfg.ScratchDir); err != nil {
		return report.Result{}, err
	}
	restore := RestoreConfig{DataDir: cfg.ScratchDir, Name: verifyMember, InitialCluster: verifyMember + "=" + verifyPeerURL,
		Token: verifyMember, PeerURL: verifyPeerURL, Etcdutl: cfg.Etcdutl}
	if err := runEtcdutl(ctx, restore, file); err != nil {
		return report.Result{}, err
	}
	found, err := readRestored(ctx, filepath.Join(cfg.ScratchDir, stagingDir, memberDir, "snap", "db"), cfg.Expect.Revision)
	if err != nil {
		return report.Result{}, err
	}
	note, err := compareKeys(found, cfg.Expect, uri)
	if err != nil {
		return report.Result{}, err
	}
	res := report.Result{URI: uri, SizeBytes: src.size, Message: note,
		Revision: found.Revision, KeyCount: &found.KeyCount, KVHash: found.KVHash, CompactRevision: found.CompactRevision}
	if src.sha256 != "" {
		res.Checksum = "sha256:" + src.sha256
	}
	log.Info("Verified", "uri", uri, "revision", found.Revision, "keys", found.KeyCount, "note", note)
	return res, nil
}

// expectFile makes the checksum and size recorded in the snapshot's status
// the ones the file is read against. They win over the manifest next to the
// file: a file replaced together with its manifest agrees with its manifest.
func expectFile(src *source, e Expected, uri string) error {
	if e.SizeBytes != 0 && e.SizeBytes != src.size {
		return permanent(conditions.ReasonMismatch, "%s has %d bytes; %d were stored: the file was truncated or replaced", uri, src.size, e.SizeBytes)
	}
	want := strings.TrimPrefix(e.Checksum, "sha256:")
	if want == "" {
		return nil
	}
	if src.sha256 != "" && src.sha256 != want {
		return permanent(conditions.ReasonMismatch, "the manifest next to %s says sha256 %s, the snapshot was stored with %s: the file was replaced", uri, src.sha256, want)
	}
	src.sha256 = want
	return nil
}

// restoredKeys is what the restored data holds.
type restoredKeys struct {
	// Revision is the restored data's own; KeyCount and KVHash are at the
	// compared revision.
	Revision, CompactRevision int64
	KeyCount                  int64
	KVHash                    *uint32
}

// readRestored opens the restored backend with etcd's storage packages and
// counts and hashes its keys at the given revision (its own when 0). A
// revision the data does not reach is left to compareKeys; one it has
// compacted away leaves the hash unknown.
func readRestored(ctx context.Context, db string, at int64) (*restoredKeys, error) {
	if _, err := os.Stat(db); err != nil {
		return nil, permanent(conditions.ReasonRestoreFailed, "etcdutl left no database at %s: %v", db, err)
	}
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	defer func() { _ = be.Close() }()
	s := mvcc.NewStore(zap.NewNop(), be, &lease.FakeLessor{}, mvcc.StoreConfig{})
	defer func() { _ = s.Close() }()
	found := &restoredKeys{Revision: s.Rev()}
	if at == 0 || at > found.Revision {
		at = found.Revision
	}
	txn := s.Read(mvcc.ConcurrentReadTxMode, traceutil.TODO())
	// From the first key to the end of the keyspace: "\x00" to "".
	r, err := txn.Range(ctx, []byte{0}, []byte{}, mvcc.RangeOptions{Rev: at, CountOnly: true})
	txn.End()
	if err != nil {
		return nil, permanent(conditions.ReasonMismatch, "counting the restored keys at revision %d: %v", at, err)
	}
	found.KeyCount = int64(r.Count)
	h, _, err := s.HashStorage().HashByRev(at)
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
	case err != nil:
		return nil, permanent(conditions.ReasonMismatch, "hashing the restored keys at revision %d: %v", at, err)
	default:
		found.KVHash, found.CompactRevision = &h.Hash, h.CompactRevision
	}
	return found, nil
}

// compareKeys compares the restored keys with the record; it returns a note
// on what could not be compared.
func compareKeys(found *restoredKeys, e Expected, uri string) (string, error) {
	if e.Revision > found.Revision {
		return "", permanent(conditions.ReasonMismatch,
			"the data restored from %s ends at revision %d, but the snapshot was taken after revision %d: it is not the snapshot that was stored", uri, found.Revision, e.Revision)
	}
	if e.KeyCount != nil && *e.KeyCount != found.KeyCount {
		return "", permanent(conditions.ReasonMismatch,
			"the data restored from %s holds %d keys at revision %d; the cluster held %d when the snapshot was taken", uri, found.KeyCount, e.Revision, *e.KeyCount)
	}
	switch {
	case e.KVHash == nil:
		return "no hash of the keys was recorded with the snapshot: the keys were counted, not hashed", nil
	case found.KVHash == nil || found.CompactRevision != e.CompactRevision:
		// etcd hashes the history kept since the last compaction: a
		// compaction between the hash and the snapshot changes it.
		return fmt.Sprintf("the cluster compacted while the snapshot was taken (to revision %d, recorded %d): the hash of the keys could not be compared",
			found.CompactRevision, e.CompactRevision), nil
	case *found.KVHash != *e.KVHash:
		return "", permanent(conditions.ReasonMismatch,
			"etcd's hash of the keys restored from %s at revision %d is %d; the cluster's was %d when the snapshot was taken", uri, e.Revision, *found.KVHash, *e.KVHash)
	}
	return "", nil
}

// verificationError reports a failure under the Verified condition's
// reasons: ArtifactMissing, Mismatch and RestoreFailed say what is wrong
// with the snapshot; anything else stopped the verification itself and is
// VerificationFailed, with its own reason in the message.
func verificationError(err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		return transient(conditions.ReasonVerificationFailed, "%v", err)
	}
	reason, msg := e.Reason, e.Error()
	switch e.Reason {
	case conditions.ReasonSnapshotNotFound:
		reason = conditions.ReasonArtifactMissing
	case conditions.ReasonChecksumMismatch, conditions.ReasonSnapshotCorrupt:
		reason = conditions.ReasonMismatch
	case conditions.ReasonMismatch, conditions.ReasonRestoreFailed:
	default:
		reason, msg = conditions.ReasonVerificationFailed, e.Reason+": "+msg
	}
	return &Error{Reason: reason, Permanent: e.Permanent, Err: errors.New(msg)}
}
