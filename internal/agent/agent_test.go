package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The embedded server is the etcd of go.mod; its release is in the
// toolchain too, whose etcdutl restores what it wrote.
const embeddedVersion = "3.7.3"

func snapshotConfig(e *testEtcd, dest Location, name, uid string) SnapshotConfig {
	return SnapshotConfig{Etcd: e.access, Destination: dest, Namespace: "ns", Name: name, UID: uid, Cluster: "c", Timeout: time.Minute}
}

func restoreConfig(t *testing.T, src Location, version string) RestoreConfig {
	t.Helper()
	return RestoreConfig{
		Source: src, DataDir: t.TempDir(), Name: "restored", InitialCluster: "restored=http://127.0.0.1:1",
		Token: "tok", PeerURL: "http://127.0.0.1:1", State: "new", TargetVersion: version,
		Etcdutl: etcdutl(t, version), Timeout: time.Minute,
	}
}

// succeeds returns a check that an agent's run succeeded: call it on the
// run, succeeds(t)(Snapshot(...)).
func succeeds(t *testing.T) func(report.Result, int) report.Result {
	t.Helper()
	return func(res report.Result, code int) report.Result {
		t.Helper()
		if code != 0 || res.Failed() {
			t.Fatalf("failed with exit %d: %s: %s", code, res.Reason, res.Message)
		}
		return res
	}
}

func mustFail(t *testing.T, res report.Result, code int, reason string, permanent bool) {
	t.Helper()
	want := report.ExitTransient
	if permanent {
		want = report.ExitPermanent
	}
	if res.Reason != reason || code != want {
		t.Fatalf("got %s (exit %d): %s; want %s (exit %d)", res.Reason, code, res.Message, reason, want)
	}
}

// restoreAndCompare restores the snapshot into a fresh data directory and
// checks every key and value against want.
func restoreAndCompare(t *testing.T, src Location, want map[string]string) report.Result {
	t.Helper()
	cfg := restoreConfig(t, src, embeddedVersion)
	res := succeeds(t)(Restore(context.Background(), cfg, quiet))
	got := readAll(t, cfg.DataDir, cfg.Name, "http://"+freeAddr(t), "", "")
	if !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d (equal: %t)", len(got), len(want), maps.Equal(got, want))
	}
	entries, _ := os.ReadDir(cfg.DataDir)
	if len(entries) != 1 || entries[0].Name() != memberDir {
		t.Errorf("the data directory holds %v, want only %s", entries, memberDir)
	}
	return res
}

func TestSnapshotToS3AndRestore(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 500, 100)
	m := startMinIO(t)
	bucket := m.bucket(t)
	res := succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, m.s3(bucket, "team/prod"), "snap1", "uid-1"), quiet))
	if res.URI != "s3://"+bucket+"/team/prod/snap1.db" || res.EtcdVersion != embeddedVersion || res.SizeBytes == 0 || !strings.HasPrefix(res.Checksum, "sha256:") {
		t.Fatalf("result %+v", res)
	}
	// The object's own metadata and content agree with the result.
	obj, err := m.admin.GetObject(context.Background(), bucket, "team/prod/snap1.db", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); int64(len(data)) != res.SizeBytes || res.Checksum != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("stored object: %d bytes %x; result says %d %s", len(data), sum, res.SizeBytes, res.Checksum)
	}
	info, err := m.admin.StatObject(context.Background(), bucket, "team/prod/snap1.db", minio.StatObjectOptions{})
	if err != nil || metaValue(info.UserMetadata, metaSnapshotUID) != "uid-1" || metaValue(info.UserMetadata, metaEtcdVersion) != embeddedVersion {
		t.Errorf("object metadata %v (%v)", info.UserMetadata, err)
	}
	restored := restoreAndCompare(t, m.s3(bucket, "team/prod/snap1.db"), want)
	if restored.Checksum != res.Checksum {
		t.Errorf("the restore verified %q, the snapshot stored %q", restored.Checksum, res.Checksum)
	}
}

func TestSnapshotToVolumeAndRestore(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 500, 100)
	mount := t.TempDir()
	dest := Location{Kind: "pvc", MountPath: mount, SubPath: "backups/prod"}
	res := succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, dest, "snap1", "uid-1"), quiet))
	file := filepath.Join(mount, "backups/prod/snap1.db")
	if res.URI != "file://"+file {
		t.Fatalf("uri %s", res.URI)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if res.Checksum != "sha256:"+hex.EncodeToString(sum[:]) || res.SizeBytes != int64(len(data)) {
		t.Errorf("file %d bytes %x; result %+v", len(data), sum, res)
	}
	// Nothing but the snapshot and its manifest: no temporary file left.
	entries, _ := os.ReadDir(filepath.Dir(file))
	if len(entries) != 2 {
		t.Errorf("destination holds %v", entries)
	}
	restoreAndCompare(t, Location{Kind: "pvc", MountPath: mount, SubPath: "backups/prod/snap1.db"}, want)
}

// An object or file that another snapshot wrote, or that no snapshot wrote,
// is never overwritten; an earlier attempt of the same snapshot is.
func TestSnapshotNeverOverwritesAnother(t *testing.T) {
	e := startEtcd(t)
	fill(t, e.client(t), 10, 10)
	m := startMinIO(t)
	for name, dest := range map[string]Location{
		"s3":     m.s3(m.bucket(t), "p"),
		"volume": {Kind: "pvc", MountPath: t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, dest, "snap", "uid-1"), quiet))
			res, code := Snapshot(context.Background(), snapshotConfig(e, dest, "snap", "uid-2"), quiet)
			mustFail(t, res, code, conditions.ReasonSnapshotExists, true)
			if !strings.Contains(res.Message, "uid-1") {
				t.Errorf("message does not name the writer: %s", res.Message)
			}
			succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, dest, "snap", "uid-1"), quiet))
		})
	}
	// A file nobody's manifest claims.
	mount := t.TempDir()
	if err := os.WriteFile(filepath.Join(mount, "other.db"), []byte("not ours"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, code := Snapshot(context.Background(), snapshotConfig(e, Location{Kind: "pvc", MountPath: mount}, "other", "uid-3"), quiet)
	mustFail(t, res, code, conditions.ReasonSnapshotExists, true)
	if data, _ := os.ReadFile(filepath.Join(mount, "other.db")); string(data) != "not ours" {
		t.Error("the foreign file was changed")
	}
}

func TestSnapshotStoreFailures(t *testing.T) {
	e := startEtcd(t)
	fill(t, e.client(t), 10, 10)
	m := startMinIO(t)
	bucket := m.bucket(t)
	wrongSecret := m.s3(bucket, "")
	wrongSecret.S3.SecretKey = "not-the-secret"
	unknownKey := m.s3(bucket, "")
	unknownKey.S3.AccessKey = "nobody"
	noBucket := m.s3("no-such-bucket", "")
	down := m.s3(bucket, "")
	down.S3.Endpoint = "http://" + freeAddr(t)
	for _, tc := range []struct {
		name      string
		dest      Location
		reason    string
		permanent bool
	}{
		{"wrong secret key", wrongSecret, conditions.ReasonS3CredentialsRejected, true},
		{"unknown access key", unknownKey, conditions.ReasonS3CredentialsRejected, true},
		{"missing bucket", noBucket, conditions.ReasonBucketNotFound, true},
		{"store down", down, conditions.ReasonStorageUnreachable, false},
		{"subPath climbing out", Location{Kind: "pvc", MountPath: t.TempDir(), SubPath: "../etc"}, conditions.ReasonInvalidDestination, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, code := Snapshot(context.Background(), snapshotConfig(e, tc.dest, "snap", "uid"), quiet)
			mustFail(t, res, code, tc.reason, tc.permanent)
		})
	}
}

func TestSnapshotOfUnreachableCluster(t *testing.T) {
	cfg := SnapshotConfig{Etcd: EtcdAccess{Endpoints: []string{"http://" + freeAddr(t)}},
		Destination: Location{Kind: "pvc", MountPath: t.TempDir()}, Name: "s", UID: "u", Timeout: time.Minute}
	res, code := Snapshot(context.Background(), cfg, quiet)
	mustFail(t, res, code, conditions.ReasonClusterUnreachable, false)
	if entries, _ := os.ReadDir(cfg.Destination.MountPath); len(entries) != 0 {
		t.Errorf("a failed snapshot left %v", entries)
	}
}

// The agent presents TLS client certificates and etcd credentials.
func TestSnapshotOfSecuredCluster(t *testing.T) {
	e := startEtcd(t, withClientTLS)
	c := e.client(t)
	want := fill(t, c, 50, 10)
	enableAuth(t, c, "s3cret")
	dest := Location{Kind: "pvc", MountPath: t.TempDir()}

	res, code := Snapshot(context.Background(), snapshotConfig(e, dest, "anon", "u1"), quiet)
	mustFail(t, res, code, conditions.ReasonAuthRequiredNotConfigured, true)

	wrong := snapshotConfig(e, dest, "wrong", "u2")
	wrong.Etcd.Username, wrong.Etcd.Password = "root", "guess"
	res, code = Snapshot(context.Background(), wrong, quiet)
	mustFail(t, res, code, conditions.ReasonAuthCredentialsRejected, true)

	noCert := snapshotConfig(e, dest, "nocert", "u3")
	noCert.Etcd.CertFile, noCert.Etcd.KeyFile = "", ""
	noCert.Etcd.Username, noCert.Etcd.Password = "root", "s3cret"
	res, code = Snapshot(context.Background(), noCert, quiet)
	mustFail(t, res, code, conditions.ReasonClusterUnreachable, false)

	ok := snapshotConfig(e, dest, "ok", "u4")
	ok.Etcd.Username, ok.Etcd.Password = "root", "s3cret"
	succeeds(t)(Snapshot(context.Background(), ok, quiet))
	// The restored data carries the auth state: the restore itself needs
	// no credentials, and the keys are all there.
	cfg := restoreConfig(t, Location{Kind: "pvc", MountPath: dest.MountPath, SubPath: "ok.db"}, embeddedVersion)
	succeeds(t)(Restore(context.Background(), cfg, quiet))
	if got := readAll(t, cfg.DataDir, cfg.Name, "http://"+freeAddr(t), "root", "s3cret"); !maps.Equal(got, want) {
		t.Errorf("restored %d keys, want %d", len(got), len(want))
	}
}

// slowStore holds a snapshot's stream open before it reads it, as a large
// database or a slow store does.
type slowStore struct {
	store
	hold time.Duration
}

func (s slowStore) Write(ctx context.Context, name string, r io.Reader, sizeHint int64, meta fileMeta) error {
	// Not a wait for a condition: the stream must stay open past the
	// opening's bound, which is what the test is about.
	<-time.After(s.hold)
	return s.store.Write(ctx, name, r, sizeHint, meta)
}

// A snapshot that streams for longer than its stream took to open is
// stored whole: the opening's bound (10 s) used to be the stream's too, and
// cut off every snapshot that took longer to stream.
func TestSnapshotStreamOutlivesItsOpening(t *testing.T) {
	defer func(d time.Duration) { snapshotOpenTimeout = d }(snapshotOpenTimeout)
	snapshotOpenTimeout = 200 * time.Millisecond
	e := startEtcd(t)
	// More than gRPC and the client's pipe buffer before the store reads.
	want := fill(t, e.client(t), 400, 64<<10)
	mount := t.TempDir()
	fs, err := newFileStore(mount, "slow")
	if err != nil {
		t.Fatal(err)
	}
	cfg := snapshotConfig(e, Location{Kind: "pvc", MountPath: mount, SubPath: "slow"}, "snap", "uid-1")
	if _, err := takeSnapshot(context.Background(), cfg, slowStore{store: fs, hold: 5 * snapshotOpenTimeout}, quiet); err != nil {
		t.Fatalf("a snapshot streamed past its opening's bound failed: %v", err)
	}
	restoreAndCompare(t, Location{Kind: "pvc", MountPath: mount, SubPath: "slow/snap.db"}, want)
}
