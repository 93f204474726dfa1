package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// snapshotSuffix is the extension of every snapshot file.
const snapshotSuffix = ".db"

// Version is the agent's own version, recorded in manifests.
var Version = "dev"

// openStore opens the store a location names; for a snapshot the S3 key
// and PVC subPath are the prefix and directory.
func openStore(l Location, prefix string) (store, error) {
	if l.Kind == agentenv.DestinationS3 {
		return newS3Store(l.S3, prefix)
	}
	return newFileStore(l.MountPath, prefix)
}

// Snapshot streams a snapshot of the cluster into the destination and
// applies the schedule's retention. It returns the result to report and the
// exit code.
func Snapshot(ctx context.Context, cfg SnapshotConfig, log *slog.Logger) (report.Result, int) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	prefix := cfg.Destination.SubPath
	if cfg.Destination.Kind == agentenv.DestinationS3 {
		prefix = cfg.Destination.S3.Key
	}
	st, err := openStore(cfg.Destination, prefix)
	if err != nil {
		return failure(err, conditions.ReasonStorageError)
	}
	res, err := takeSnapshot(ctx, cfg, st, log)
	if err != nil {
		return failure(err, conditions.ReasonStorageError)
	}
	if cfg.ScheduleUID != "" && (cfg.KeepLast > 0 || cfg.MaxAge > 0) {
		pruned, err := prune(ctx, st, cfg, time.Now(), snapshotFile(cfg))
		for _, name := range pruned {
			res.Pruned = append(res.Pruned, st.URI(name))
		}
		res.PrunedCount = len(pruned)
		if err != nil {
			res.PruneError = err.Error()
			log.Warn("Retention could not delete every snapshot it should have", "error", err)
		}
	}
	return res, 0
}

// snapshotFile is the stored file's name: <name>.db, or <name>.db.zst when
// compressed.
func snapshotFile(cfg SnapshotConfig) string {
	if cfg.Compression == agentenv.CompressionZstd {
		return cfg.Name + snapshotSuffix + zstdSuffix
	}
	return cfg.Name + snapshotSuffix
}

// takeSnapshot refuses to overwrite another snapshot's file, then streams.
func takeSnapshot(ctx context.Context, cfg SnapshotConfig, st store, log *slog.Logger) (report.Result, error) {
	if err := st.Check(ctx); err != nil {
		return report.Result{}, err
	}
	file := snapshotFile(cfg)
	if err := refuseOverwrite(ctx, st, file, cfg.UID); err != nil {
		return report.Result{}, err
	}
	c, err := dialEtcd(ctx, cfg.Etcd)
	if err != nil {
		return report.Result{}, err
	}
	defer func() { _ = c.Close() }()
	status, err := memberStatus(ctx, c, cfg.Etcd)
	if err != nil {
		return report.Result{}, err
	}
	keys := recordKeys(ctx, c, log)
	// The opening is bounded, the stream is not: a gRPC stream lives and
	// dies with the context it was opened with, so a deadline on that
	// context would cut off every snapshot that takes longer to stream
	// (a large database, a slow store). A timer cancels the opening only;
	// from the first message on, only the run's own deadline bounds it.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opening := time.AfterFunc(snapshotOpenTimeout, cancel)
	resp, err := c.SnapshotWithVersion(sctx)
	if stopped := opening.Stop(); err == nil && !stopped {
		_ = resp.Snapshot.Close()
		err = fmt.Errorf("opening the snapshot stream took longer than %s: %w", snapshotOpenTimeout, context.DeadlineExceeded)
	}
	if err != nil {
		return report.Result{}, etcdError(err, cfg.Etcd)
	}
	defer func() { _ = resp.Snapshot.Close() }()
	// The member's own version: the snapshot stream's (etcd 3.6 and later)
	// is its storage version, which names no patch release.
	version := status.Version
	log.Info("Streaming the snapshot", "member", fmt.Sprintf("%016x", status.Header.MemberId),
		"etcdVersion", version, "dbSize", status.DbSize, "to", st.URI(file))
	started := time.Now()
	// db counts etcd's snapshot; counted, what is stored (the same bytes,
	// or their compression).
	db := newCountingHash(resp.Snapshot)
	var body io.Reader = streamErrors{db}
	if cfg.Compression == agentenv.CompressionZstd {
		var stop func()
		body, stop = compressing(body)
		defer stop()
	}
	counted := newCountingHash(body)
	if err := st.Write(ctx, file, counted, status.DbSize, fileMeta{SnapshotUID: cfg.UID, EtcdVersion: version}); err != nil {
		return report.Result{}, err
	}
	sum := counted.sum()
	m := &manifest{
		Kind: manifestKind, Snapshot: objectRef{Namespace: cfg.Namespace, Name: cfg.Name, UID: cfg.UID},
		Cluster: cfg.Cluster, File: file, Size: counted.n, SHA256: sum, Version: version,
		Compression: cfg.Compression, DBSize: db.n,
		Revision: keys.Revision, KeyCount: keys.KeyCount, KVHash: keys.KVHash, CompactRevision: keys.CompactRevision,
		Created: time.Now().UTC(), Agent: manifestTool{Version: Version},
	}
	if m.Revision == 0 {
		m.Revision = resp.Header.GetRevision()
	}
	if cfg.ScheduleUID != "" {
		m.Schedule = &objectRef{Namespace: cfg.Namespace, Name: cfg.ScheduleName, UID: cfg.ScheduleUID}
	}
	if err := writeManifest(ctx, st, m); err != nil {
		return report.Result{}, err
	}
	took := time.Since(started)
	log.Info("Snapshot stored", "uri", st.URI(file), "bytes", counted.n, "dbBytes", db.n, "sha256", sum, "seconds", took.Seconds(),
		"MBps", float64(counted.n)/1e6/max(took.Seconds(), 1e-3))
	return report.Result{URI: st.URI(file), SizeBytes: counted.n, Checksum: "sha256:" + sum,
		EtcdVersion: version, Revision: m.Revision, KeyCount: keys.KeyCount, KVHash: keys.KVHash, CompactRevision: keys.CompactRevision}, nil
}

// keyRecord is what a verification compares the restored data with.
type keyRecord struct {
	Revision        int64
	KeyCount        *int64
	KVHash          *uint32
	CompactRevision int64
}

// recordKeys reads, just before the snapshot, the revision, how many keys
// there are at it and etcd's hash of them. The snapshot holds that revision
// or a later one, so a restore of it must show the same count and hash at
// that revision. A serializable read, over the snapshot's own connection:
// it is the same member's own state, which the member can hash and which
// its snapshot, taken after, contains. Any
// failure leaves what it could not read unknown: the snapshot is still
// worth storing, its verification then compares less.
func recordKeys(ctx context.Context, c *clientv3.Client, log *slog.Logger) keyRecord {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var rec keyRecord
	resp, err := c.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		log.Warn("Could not count the keys: the snapshot is stored without the count and hash a verification compares", "error", err)
		return rec
	}
	rec.Revision, rec.KeyCount = resp.Header.GetRevision(), &resp.Count
	h, err := etcdserverpb.NewMaintenanceClient(c.ActiveConnection()).HashKV(ctx, &etcdserverpb.HashKVRequest{Revision: rec.Revision})
	if err != nil {
		log.Warn("Could not hash the keys: the snapshot is stored without the hash a verification compares", "error", err)
		return rec
	}
	rec.KVHash, rec.CompactRevision = &h.Hash, h.CompactRevision
	return rec
}

// refuseOverwrite fails when the file exists and another snapshot (or
// something else) wrote it; a file of this very snapshot is an earlier
// attempt of it, which may be replaced.
func refuseOverwrite(ctx context.Context, st store, file, uid string) error {
	info, err := st.Stat(ctx, file)
	if err != nil || info == nil {
		return err
	}
	owner, err := ownerOf(ctx, st, file, info)
	if err != nil {
		return err
	}
	if owner == uid {
		return nil
	}
	who := "something other than a snapshot of this operator"
	if owner != "" {
		who = "another snapshot (UID " + owner + ")"
	}
	return permanent(conditions.ReasonSnapshotExists,
		"%s already exists, written by %s; it is never overwritten: use another snapshot name or destination, or delete it", st.URI(file), who)
}

// countingHash counts and hashes what is read through it.
type countingHash struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newCountingHash(r io.Reader) *countingHash { return &countingHash{r: r, h: sha256.New()} }

func (c *countingHash) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// streamErrors reports a broken snapshot stream under its own reason, so a
// store does not take it for its own failure.
type streamErrors struct{ r io.Reader }

func (s streamErrors) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, transient(conditions.ReasonSnapshotStreamFailed, "etcd's snapshot stream broke off: %v", err)
	}
	return n, err
}
