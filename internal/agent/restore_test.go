package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// snapshotOnVolume takes a snapshot into a fresh volume directory and
// returns the restore source of it.
func snapshotOnVolume(t *testing.T) (Location, string) {
	t.Helper()
	e := startEtcd(t)
	fill(t, e.client(t), 200, 50)
	mount := t.TempDir()
	succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, Location{Kind: "pvc", MountPath: mount}, "snap", "uid"), quiet))
	return Location{Kind: "pvc", MountPath: mount, SubPath: "snap.db"}, filepath.Join(mount, "snap.db")
}

// corrupt flips bytes in the middle of a file.
func corrupt(t *testing.T, file string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	info, _ := f.Stat()
	if _, err := f.WriteAt([]byte("this is not what etcd wrote"), info.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// emptyAfter fails unless a failed restore left the data directory empty.
func emptyAfter(t *testing.T, dataDir string) {
	t.Helper()
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("a failed restore left %v in the data directory", entries)
	}
}

func TestRestoreRefusesDamagedSnapshots(t *testing.T) {
	t.Run("checksum from the manifest", func(t *testing.T) {
		src, file := snapshotOnVolume(t)
		corrupt(t, file)
		cfg := restoreConfig(t, src, embeddedVersion)
		res, code := Restore(context.Background(), cfg, quiet)
		mustFail(t, res, code, conditions.ReasonChecksumMismatch, true)
		emptyAfter(t, cfg.DataDir)
	})
	t.Run("etcd's own hash, no manifest", func(t *testing.T) {
		src, file := snapshotOnVolume(t)
		if err := os.Remove(file + manifestSuffix); err != nil {
			t.Fatal(err)
		}
		corrupt(t, file)
		cfg := restoreConfig(t, src, embeddedVersion)
		res, code := Restore(context.Background(), cfg, quiet)
		mustFail(t, res, code, conditions.ReasonSnapshotCorrupt, true)
		emptyAfter(t, cfg.DataDir)
	})
	t.Run("truncated object in S3", func(t *testing.T) {
		src, file := snapshotOnVolume(t)
		m := startMinIO(t)
		bucket := m.bucket(t)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		st, err := newS3Store(m.s3(bucket, "").S3, "")
		if err != nil {
			t.Fatal(err)
		}
		// A snapshot of some other tool, cut short.
		if err := st.Write(context.Background(), "cut.db", strings.NewReader(string(data[:len(data)/2])), 0, fileMeta{}); err != nil {
			t.Fatal(err)
		}
		_ = src
		cfg := restoreConfig(t, m.s3(bucket, "cut.db"), embeddedVersion)
		res, code := Restore(context.Background(), cfg, quiet)
		mustFail(t, res, code, conditions.ReasonSnapshotCorrupt, true)
		emptyAfter(t, cfg.DataDir)
	})
}

func TestRestoreRefusesAnOlderMinor(t *testing.T) {
	src, _ := snapshotOnVolume(t)
	cfg := restoreConfig(t, src, "3.6.16")
	res, code := Restore(context.Background(), cfg, quiet)
	mustFail(t, res, code, conditions.ReasonSnapshotFromNewerEtcd, true)
	if !strings.Contains(res.Message, "etcd "+embeddedVersion) || !strings.Contains(res.Message, "3.7 or newer") {
		t.Errorf("message does not say which versions: %s", res.Message)
	}
	emptyAfter(t, cfg.DataDir)
}

func TestRestoreMissingSnapshot(t *testing.T) {
	m := startMinIO(t)
	for name, src := range map[string]Location{
		"s3":     m.s3(m.bucket(t), "none/such.db"),
		"volume": {Kind: "pvc", MountPath: t.TempDir(), SubPath: "none/such.db"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := restoreConfig(t, src, embeddedVersion)
			res, code := Restore(context.Background(), cfg, quiet)
			mustFail(t, res, code, conditions.ReasonSnapshotNotFound, true)
			emptyAfter(t, cfg.DataDir)
		})
	}
}

// Only the seed of a cluster that never formed restores, and only into a
// data directory without a member: an empty data directory of a formed
// cluster is a lost member, and a restored one is never restored again.
func TestRestoreOnlyIntoANewSeed(t *testing.T) {
	src, _ := snapshotOnVolume(t)
	formed := restoreConfig(t, src, embeddedVersion)
	formed.State = "existing"
	succeeds(t)(Restore(context.Background(), formed, quiet))
	emptyAfter(t, formed.DataDir)

	cfg := restoreConfig(t, src, embeddedVersion)
	succeeds(t)(Restore(context.Background(), cfg, quiet))
	marker := filepath.Join(cfg.DataDir, memberDir, "marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	succeeds(t)(Restore(context.Background(), cfg, quiet))
	if _, err := os.Stat(marker); err != nil {
		t.Error("a second restore replaced the member directory")
	}
}

func TestRestoreChecksFreeSpaceFirst(t *testing.T) {
	src, _ := snapshotOnVolume(t)
	cfg := restoreConfig(t, src, embeddedVersion)
	was := freeBytes
	t.Cleanup(func() { freeBytes = was })
	freeBytes = func(string) (int64, error) { return walReserve, nil }
	res, code := Restore(context.Background(), cfg, quiet)
	mustFail(t, res, code, conditions.ReasonInsufficientSpace, true)
	emptyAfter(t, cfg.DataDir)
}

// A restore interrupted halfway leaves staging behind; the next attempt
// clears it and succeeds.
func TestRestoreClearsAnEarlierAttempt(t *testing.T) {
	src, _ := snapshotOnVolume(t)
	cfg := restoreConfig(t, src, embeddedVersion)
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, stagingDir, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, downloadTmp), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	succeeds(t)(Restore(context.Background(), cfg, quiet))
	entries, _ := os.ReadDir(cfg.DataDir)
	if len(entries) != 1 || entries[0].Name() != memberDir {
		t.Errorf("data directory holds %v", entries)
	}
}
