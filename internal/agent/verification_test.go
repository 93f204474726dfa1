package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// verifyConfig verifies src against what the snapshot agent reported.
func verifyConfig(t *testing.T, src Location, taken report.Result) VerifyConfig {
	t.Helper()
	return VerifyConfig{
		Source: src, ScratchDir: t.TempDir(), Etcdutl: etcdutl(t, embeddedVersion), Timeout: time.Minute,
		Expect: Expected{Checksum: taken.Checksum, SizeBytes: taken.SizeBytes, Revision: taken.Revision,
			KeyCount: taken.KeyCount, KVHash: taken.KVHash, CompactRevision: taken.CompactRevision},
	}
}

// history gives the cluster a history worth hashing: 200 keys, 50 of them
// deleted, 20 overwritten, compacted halfway, and written after that.
// It returns how many keys are left.
func history(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	fill(t, c, 200, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		if _, err := c.Delete(ctx, fmt.Sprintf("key/%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Put(ctx, "other/marker", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 120; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("key/%06d", i), "again"); err != nil {
			t.Fatal(err)
		}
	}
	return 200 - 50 + 1
}

// storedOnVolume takes a snapshot of a cluster with a history into a volume.
func storedOnVolume(t *testing.T) (Location, string, report.Result, int64) {
	t.Helper()
	e := startEtcd(t)
	keys := history(t, e.client(t))
	mount := t.TempDir()
	res := succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, Location{Kind: "pvc", MountPath: mount}, "snap", "uid"), quiet))
	return Location{Kind: "pvc", MountPath: mount, SubPath: "snap.db"}, filepath.Join(mount, "snap.db"), res, keys
}

func TestSnapshotRecordsWhatVerificationCompares(t *testing.T) {
	_, _, res, keys := storedOnVolume(t)
	if res.Revision == 0 || res.KeyCount == nil || *res.KeyCount != keys || res.KVHash == nil || res.CompactRevision <= 0 {
		t.Fatalf("recorded revision %d, keys %v (want %d), hash %v, compacted at %d", res.Revision, res.KeyCount, keys, res.KVHash, res.CompactRevision)
	}
}

func TestVerifyAStoredSnapshot(t *testing.T) {
	src, _, taken, keys := storedOnVolume(t)
	cfg := verifyConfig(t, src, taken)
	res := succeeds(t)(VerifySnapshot(context.Background(), cfg, quiet))
	if res.Revision != taken.Revision || res.KeyCount == nil || *res.KeyCount != keys || res.KVHash == nil || *res.KVHash != *taken.KVHash ||
		res.Checksum != taken.Checksum || res.Message != "" {
		t.Errorf("verified %+v (keys %v, hash %v); taken %+v", res, res.KeyCount, res.KVHash, taken)
	}
	if entries, _ := os.ReadDir(cfg.ScratchDir); len(entries) != 0 {
		t.Errorf("the scratch directory holds %v", entries)
	}
}

func TestVerifyFromS3(t *testing.T) {
	e := startEtcd(t)
	keys := history(t, e.client(t))
	m := startMinIO(t)
	bucket := m.bucket(t)
	taken := succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, m.s3(bucket, "prod"), "snap", "uid"), quiet))
	cfg := verifyConfig(t, m.s3(bucket, "prod/snap.db"), taken)
	res := succeeds(t)(VerifySnapshot(context.Background(), cfg, quiet))
	if res.KeyCount == nil || *res.KeyCount != keys || res.Checksum != taken.Checksum {
		t.Errorf("verified %+v", res)
	}
	if entries, _ := os.ReadDir(cfg.ScratchDir); len(entries) != 0 {
		t.Errorf("the downloaded copy stayed: %v", entries)
	}
}

func TestVerifyRefusesADamagedSnapshot(t *testing.T) {
	t.Run("checksum", func(t *testing.T) {
		src, file, taken, _ := storedOnVolume(t)
		corrupt(t, file)
		res, code := VerifySnapshot(context.Background(), verifyConfig(t, src, taken), quiet)
		mustFail(t, res, code, conditions.ReasonMismatch, true)
		if !strings.Contains(res.Message, "sha256") {
			t.Errorf("message does not say the checksum differs: %s", res.Message)
		}
	})
	t.Run("etcd's own hash, nothing recorded", func(t *testing.T) {
		src, file, _, _ := storedOnVolume(t)
		if err := os.Remove(file + manifestSuffix); err != nil {
			t.Fatal(err)
		}
		corrupt(t, file)
		res, code := VerifySnapshot(context.Background(), verifyConfig(t, src, report.Result{}), quiet)
		mustFail(t, res, code, conditions.ReasonMismatch, true)
	})
	t.Run("replaced with its manifest", func(t *testing.T) {
		src, file, taken, _ := storedOnVolume(t)
		other, _, _, _ := storedOnVolume(t)
		for _, suffix := range []string{"", manifestSuffix} {
			data, err := os.ReadFile(filepath.Join(other.MountPath, other.SubPath+suffix))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file+suffix, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		taken.SizeBytes = 0 // the two may well have the same size
		res, code := VerifySnapshot(context.Background(), verifyConfig(t, src, taken), quiet)
		mustFail(t, res, code, conditions.ReasonMismatch, true)
	})
}

// The file is intact but not what the record says was in the cluster.
func TestVerifyComparesTheRestoredKeys(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Expected)
		text   string
	}{
		{"key count", func(e *Expected) { *e.KeyCount++ }, "keys at revision"},
		{"hash", func(e *Expected) { *e.KVHash++ }, "hash of the keys"},
		{"revision", func(e *Expected) { e.Revision += 10 }, "ends at revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _, taken, _ := storedOnVolume(t)
			cfg := verifyConfig(t, src, taken)
			count, hash := *cfg.Expect.KeyCount, *cfg.Expect.KVHash
			cfg.Expect.KeyCount, cfg.Expect.KVHash = &count, &hash
			tc.change(&cfg.Expect)
			res, code := VerifySnapshot(context.Background(), cfg, quiet)
			mustFail(t, res, code, conditions.ReasonMismatch, true)
			if !strings.Contains(res.Message, tc.text) {
				t.Errorf("message %q does not mention %q", res.Message, tc.text)
			}
		})
	}
}

func TestVerifyMissingArtifact(t *testing.T) {
	m := startMinIO(t)
	for name, src := range map[string]Location{
		"s3":     m.s3(m.bucket(t), "none/such.db"),
		"volume": {Kind: "pvc", MountPath: t.TempDir(), SubPath: "none/such.db"},
	} {
		t.Run(name, func(t *testing.T) {
			res, code := VerifySnapshot(context.Background(), verifyConfig(t, src, report.Result{}), quiet)
			mustFail(t, res, code, conditions.ReasonArtifactMissing, true)
		})
	}
}

// A failure that says nothing about the snapshot is VerificationFailed,
// with the store's own reason in the message.
func TestVerifyStoreFailure(t *testing.T) {
	m := startMinIO(t)
	src := m.s3(m.bucket(t), "snap.db")
	src.S3.SecretKey = "wrong"
	res, code := VerifySnapshot(context.Background(), verifyConfig(t, src, report.Result{}), quiet)
	mustFail(t, res, code, conditions.ReasonVerificationFailed, true)
	if !strings.HasPrefix(res.Message, conditions.ReasonS3CredentialsRejected+": ") {
		t.Errorf("message %q", res.Message)
	}
}

func TestVerifyConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"VERIFY_SCRATCH_DIR": "/s", "SNAPSHOT_DEST_KIND": "pvc", "PVC_MOUNT_PATH": "/m", "PVC_SUBPATH": "a/b.db",
		"EXPECT_CHECKSUM": "sha256:ab", "EXPECT_SIZE_BYTES": "-1", "EXPECT_REVISION": "7", "EXPECT_KEY_COUNT": "0",
		"EXPECT_KV_HASH": "4000000000", "EXPECT_COMPACT_REVISION": "-1",
	}
	get := func(k string) string { return env[k] }
	if _, err := VerifyConfigFromEnv(get); err == nil {
		t.Error("a negative size was accepted")
	}
	env["EXPECT_SIZE_BYTES"] = "42"
	cfg, err := VerifyConfigFromEnv(get)
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Expect
	if e.Checksum != "sha256:ab" || e.SizeBytes != 42 || e.Revision != 7 || e.KeyCount == nil || *e.KeyCount != 0 ||
		e.KVHash == nil || *e.KVHash != 4000000000 || e.CompactRevision != -1 || cfg.Etcdutl != "/usr/local/bin/etcdutl" {
		t.Errorf("config %+v", cfg)
	}
	delete(env, "PVC_SUBPATH")
	if _, err := VerifyConfigFromEnv(get); err == nil {
		t.Error("a source naming no file was accepted")
	}
}
