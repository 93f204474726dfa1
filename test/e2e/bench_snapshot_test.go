//go:build bench

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// benchDBSize is the database the snapshot rows measure.
const benchDBSize = 256 << 20

// TestBenchSnapshot runs the snapshot rows alone: `go test -tags bench -run
// TestBenchSnapshot ./test/e2e/`.
func TestBenchSnapshot(t *testing.T) {
	report(t, snapshotBench(t))
}

// snapshotBench measures, on this machine and for one 256 MiB database, the
// operator binary's snapshot agent (to MinIO and to a file) and restore agent
// (from each), side by side with etcdctl snapshot save and etcdutl snapshot
// restore of the same database: throughput and each process's peak memory.
// The processes are the ones the Job and the init containers run; here they
// run on the host, next to a real etcd and a real MinIO on loopback, so that
// the comparison with etcdctl is the same machine, disk and database.
func snapshotBench(t *testing.T) []result {
	dir := t.TempDir()
	etcdDir, err := tools.EtcdDir(etcdVersion)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := startBenchEtcd(t, dir, etcdDir)
	size := fillBench(t, endpoint)
	s3 := startBenchMinIO(t, dir)
	agent := filepath.Join(tools.RepoRoot(), "bin", "manager")
	mb := float64(size) / 1e6
	var rows []result
	add := func(scenario string, r procRun) {
		memory := scenario + ": peak memory (RSS)"
		if strings.HasPrefix(scenario, "restore agent") {
			memory = scenario + ": the agent's own peak memory (its etcdutl's is the etcdutl row's)"
		}
		rows = append(rows,
			row(scenario+": throughput", mb/r.took.Seconds(), "MB/s", "reported", 0),
			row(memory, float64(r.maxRSS)/(1<<20), "MiB", "reported", 0))
	}
	snapshotEnv := []string{"ETCD_ENDPOINTS=" + endpoint, "SNAPSHOT_NAME=bench", "SNAPSHOT_UID=bench-uid", "SNAPSHOT_NAMESPACE=bench",
		"TERMINATION_MESSAGE_PATH=" + filepath.Join(dir, "term")}
	add(fmt.Sprintf("etcdctl snapshot save, %d MiB db → file (the floor)", size>>20),
		measure(t, filepath.Join(etcdDir, "etcdctl"), nil, "--endpoints", endpoint, "snapshot", "save", filepath.Join(dir, "etcdctl.db")))
	add("snapshot agent → file (PVC)", measure(t, agent, append(snapshotEnv, "SNAPSHOT_DEST_KIND=pvc", "PVC_MOUNT_PATH="+dir, "PVC_SUBPATH=pvc"), "snapshot-agent"))
	add("snapshot agent → MinIO (S3 multipart)", measure(t, agent, append(snapshotEnv, s3.env("")...), "snapshot-agent"))

	restoreEnv := func(data string) []string {
		return []string{"ETCD_DATA_DIR=" + data, "ETCD_MEMBER_NAME=m", "ETCD_INITIAL_CLUSTER=m=http://127.0.0.1:1",
			"ETCD_INITIAL_CLUSTER_TOKEN=t", "ETCD_PEER_URLS=http://127.0.0.1:1", "ETCD_INITIAL_CLUSTER_STATE=new",
			"ETCD_VERSION=" + etcdVersion, "ETCDUTL_PATH=" + filepath.Join(etcdDir, "etcdutl"), "TERMINATION_MESSAGE_PATH=" + filepath.Join(dir, "term")}
	}
	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	add("etcdutl snapshot restore, file (the floor)", measure(t, filepath.Join(etcdDir, "etcdutl"), nil,
		"snapshot", "restore", filepath.Join(dir, "etcdctl.db"), "--data-dir", filepath.Join(mkdir("floor"), "d"), "--name", "m",
		"--initial-cluster", "m=http://127.0.0.1:1", "--initial-advertise-peer-urls", "http://127.0.0.1:1"))
	add("restore agent ← file (PVC; checksum, etcdutl)", measure(t, agent,
		append(restoreEnv(mkdir("from-pvc")), "SNAPSHOT_DEST_KIND=pvc", "PVC_MOUNT_PATH="+dir, "PVC_SUBPATH=pvc/bench.db"), "restore-agent"))
	add("restore agent ← MinIO (download, checksum, etcdutl)", measure(t, agent,
		append(restoreEnv(mkdir("from-s3")), s3.env("/bench.db")...), "restore-agent"))
	return rows
}

// procRun is one measured process: wall time and its peak resident memory
// (VmHWM, of the process itself: the restore agent's etcdutl is measured
// apart, in the etcdutl row).
type procRun struct {
	took   time.Duration
	maxRSS int64
}

// measure runs a command and samples its VmHWM every 10 ms. (The rusage of
// wait4 is no use here: it starts from the test process's own peak, which
// the child inherits at exec.)
func measure(t *testing.T, bin string, env []string, args ...string) procRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if hwm := vmHWM(status); hwm > peak.Load() {
				peak.Store(hwm)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	took := time.Since(start)
	close(done)
	<-sampled
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, out.String())
	}
	return procRun{took: took, maxRSS: peak.Load()}
}

// vmHWM reads a process's peak resident set size, 0 once it is gone.
func vmHWM(status string) int64 {
	data, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func benchPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func startBenchEtcd(t *testing.T, dir, etcdDir string) string {
	t.Helper()
	client, peer := "http://"+benchPort(t), "http://"+benchPort(t)
	cmd := exec.Command(filepath.Join(etcdDir, "etcd"), "--data-dir", filepath.Join(dir, "etcd"), "--name", "bench",
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster", "bench="+peer, "--quota-backend-bytes", fmt.Sprint(2<<30))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return client
}

// fillBench writes incompressible values until the database holds 256 MiB,
// and returns its size.
func fillBench(t *testing.T, endpoint string) int64 {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	value := make([]byte, 512<<10)
	var size int64
	for i := 0; size < benchDBSize; i++ {
		if _, err := rand.Read(value); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("bench/%05d", i), string(value))
		if err == nil && i%32 == 0 {
			var st *clientv3.StatusResponse
			if st, err = c.Status(ctx, endpoint); err == nil {
				size = st.DbSize
			}
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return size
}

type benchMinIO struct{ endpoint string }

func startBenchMinIO(t *testing.T, dir string) *benchMinIO {
	t.Helper()
	addr := benchPort(t)
	cmd := exec.Command(filepath.Join(bin, "minio"), "server", filepath.Join(dir, "minio"), "--address", addr, "--console-address", benchPort(t), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioPassword, "MINIO_BROWSER=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(minioUser, minioPassword, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.MakeBucket(ctx, "bench", minio.MakeBucketOptions{}) == nil, nil
	}); err != nil {
		t.Fatalf("MinIO did not start: %v", err)
	}
	return &benchMinIO{endpoint: "http://" + addr}
}

// env addresses the bucket; key is "" for a snapshot (the prefix s3) or the
// object under it for a restore.
func (m *benchMinIO) env(key string) []string {
	return []string{"SNAPSHOT_DEST_KIND=s3", "S3_ENDPOINT=" + m.endpoint, "S3_BUCKET=bench", "S3_KEY=s3" + key, "S3_FORCE_PATH_STYLE=true",
		"AWS_ACCESS_KEY_ID=" + minioUser, "AWS_SECRET_ACCESS_KEY=" + minioPassword}
}
