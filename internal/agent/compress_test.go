package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// A compressed snapshot is stored as <name>.db.zst, smaller than etcd's
// snapshot, with the stored file's size and checksum in the result and the
// compression and database size in its manifest; a restore and a
// verification recognise it by its content and get every key back, from S3
// and from a volume. A compressed file damaged in the middle is refused
// (its checksum first; without one, as a damaged compressed snapshot).
func TestCompressedSnapshot(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 500, 200)
	m := startMinIO(t)
	bucket := m.bucket(t)
	ctx := context.Background()
	for _, dest := range []struct {
		name string
		loc  Location
		file func(Location) Location
	}{
		{"s3", m.s3(bucket, "zstd"), func(l Location) Location { l.S3.Key = "zstd/snap.db.zst"; return l }},
		{"volume", Location{Kind: "pvc", MountPath: t.TempDir()}, func(l Location) Location { l.SubPath = "snap.db.zst"; return l }},
	} {
		t.Run(dest.name, func(t *testing.T) {
			cfg := snapshotConfig(e, dest.loc, "snap", "uid-"+dest.name)
			cfg.Compression = agentenv.CompressionZstd
			res := succeeds(t)(Snapshot(ctx, cfg, quiet))
			plain := succeeds(t)(Snapshot(ctx, snapshotConfig(e, dest.loc, "plain", "uid-plain-"+dest.name), quiet))
			if !strings.HasSuffix(res.URI, "/snap.db.zst") || res.SizeBytes <= 0 || res.SizeBytes*2 > plain.SizeBytes {
				t.Errorf("compressed %s: %d bytes, uncompressed %d: want <name>.db.zst at most half the size", res.URI, res.SizeBytes, plain.SizeBytes)
			}
			src := dest.file(dest.loc)
			restored := restoreAndCompare(t, src, want)
			if restored.Checksum != res.Checksum {
				t.Errorf("the restore checked %s, the snapshot stored %s", restored.Checksum, res.Checksum)
			}
			verified := succeeds(t)(VerifySnapshot(ctx, verifyConfig(t, src, res), quiet))
			if verified.KeyCount == nil || *verified.KeyCount != int64(len(want)) {
				t.Errorf("verified %+v", verified)
			}
		})
	}

	t.Run("damaged", func(t *testing.T) {
		mount := t.TempDir()
		cfg := snapshotConfig(e, Location{Kind: "pvc", MountPath: mount}, "snap", "uid-damaged")
		cfg.Compression = agentenv.CompressionZstd
		succeeds(t)(Snapshot(ctx, cfg, quiet))
		file := filepath.Join(mount, "snap.db.zst")
		corrupt(t, file)
		src := Location{Kind: "pvc", MountPath: mount, SubPath: "snap.db.zst"}
		res, code := Restore(ctx, restoreConfig(t, src, embeddedVersion), quiet)
		mustFail(t, res, code, conditions.ReasonChecksumMismatch, true)
		// Without its manifest nothing records a checksum: the decoder
		// finds the damage.
		if err := os.Remove(file + manifestSuffix); err != nil {
			t.Fatal(err)
		}
		res, code = Restore(ctx, restoreConfig(t, src, embeddedVersion), quiet)
		mustFail(t, res, code, conditions.ReasonSnapshotCorrupt, true)
	})
}
