package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// testKMSKey is the one key of the TLS MinIO's KMS.
const testKMSKey = "etcd-backups"

// startTLSMinIO runs a MinIO of its own that serves HTTPS with a
// certificate for localhost signed by ca (a private CA), and a KMS with one
// key (testKMSKey), with one bucket; it returns a location of that bucket
// without a CA bundle.
func startTLSMinIO(t *testing.T, ca *testCA) Location {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	ca.write(t, certs, "server", []string{"localhost"}, true)
	for from, to := range map[string]string{"server.crt": "public.crt", "server.key": "private.key"} {
		if err := os.Rename(filepath.Join(certs, from), filepath.Join(certs, to)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	const user, password = "tlsadmin", "tlsadmin-secret"
	cmd := exec.Command(filepath.Join(bin, "minio"), "server", t.TempDir(), "--certs-dir", certs,
		"--address", "127.0.0.1:"+port, "--console-address", "127.0.0.1:0", "--quiet")
	// A KMS of one static key, for the server-side encryption tests.
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+password, "MINIO_BROWSER=off",
		"MINIO_KMS_SECRET_KEY="+testKMSKey+":"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	loc := Location{Kind: "s3", S3: S3Config{Endpoint: "https://localhost:" + port, Bucket: "private", Key: "db",
		ForcePathStyle: true, AccessKey: user, SecretKey: password}}
	tr, err := s3Transport(S3Config{Endpoint: loc.S3.Endpoint, CABundle: string(ca.pem)}, true)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := minio.New("localhost:"+port, &minio.Options{Creds: credentials.NewStaticV4(user, password, ""), Secure: true, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return admin.MakeBucket(ctx, "private", minio.MakeBucketOptions{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("the TLS MinIO did not come up: %v", err)
	}
	return loc
}

// TestS3WithAPrivateCA snapshots to a store whose certificate a private CA
// signed: refused as untrusted without the CA bundle, stored and restored
// with it.
func TestS3WithAPrivateCA(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 50, 10)
	ca := newCA(t)
	loc := startTLSMinIO(t, ca)

	res, code := Snapshot(context.Background(), snapshotConfig(e, loc, "untrusted", "uid-1"), quiet)
	mustFail(t, res, code, conditions.ReasonS3CertificateNotTrusted, true)

	loc.S3.CABundle = string(ca.pem)
	res = succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, loc, "trusted", "uid-2"), quiet))
	if res.URI != "s3://private/db/trusted.db" {
		t.Errorf("stored at %s", res.URI)
	}
	from := loc
	from.S3.Key = "db/trusted.db"
	restoreAndCompare(t, from, want)

	bad := loc
	bad.S3.CABundle = "not a certificate"
	res, code = Snapshot(context.Background(), snapshotConfig(e, bad, "bad-bundle", "uid-3"), quiet)
	mustFail(t, res, code, conditions.ReasonInvalidDestination, true)
}

// TestS3CredentialsFromTheChain gives the agent no keys: it finds them the
// way the AWS SDKs do, here in the environment (where a workload identity
// would put a web identity token file instead).
func TestS3CredentialsFromTheChain(t *testing.T) {
	e := startEtcd(t)
	m := startMinIO(t)
	bucket := m.bucket(t)
	loc := m.s3(bucket, "chain")
	loc.S3.AccessKey, loc.S3.SecretKey = "", ""
	t.Setenv("AWS_ACCESS_KEY_ID", m.access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.secret)
	succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, loc, "chained", "uid-1"), quiet))

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	res, code := Snapshot(context.Background(), snapshotConfig(e, loc, "nothing", "uid-2"), quiet)
	if code == 0 || !res.Failed() {
		t.Fatalf("stored with no credentials anywhere: %+v", res)
	}
	loc.S3.AccessKey = m.access
	res, code = Snapshot(context.Background(), snapshotConfig(e, loc, "half", "uid-3"), quiet)
	mustFail(t, res, code, conditions.ReasonAgentMisconfigured, true)
}
