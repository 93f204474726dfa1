package dataguard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// Issue 41, claim 7: a data directory partly lost (the backend deleted, the
// first pages of its files overwritten in place) passed the guard, which
// looked only for a .wal file; etcd then exited at every start with
// messages of its own, and the member crash-looped. Each form of damage is
// made to a data directory real etcd wrote, and the guard's verdict is
// held against etcd's own: etcd, started on the same directory in a child
// process, must fail where the guard refuses and come up where it lets
// etcd run.
func TestCheckDamagedDataDirectories(t *testing.T) {
	base := etcdDataDir(t)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   error
	}{
		{"healthy", func(*testing.T, string) {}, nil},
		{"backend deleted", func(t *testing.T, dir string) { remove(t, dir, "member/snap/db") }, ErrDamaged},
		{"backend cut to its first page", func(t *testing.T, dir string) { truncate(t, dir, "member/snap/db", 4096) }, ErrDamaged},
		{"backend cut to its meta pages", func(t *testing.T, dir string) { truncate(t, dir, "member/snap/db", 8192) }, ErrDamaged},
		// bbolt keeps two meta pages and opens on the one left valid.
		{"backend's first page overwritten", func(t *testing.T, dir string) { overwrite(t, dir, "member/snap/db", 0, 4096, garbage) }, nil},
		{"backend's first two pages overwritten", func(t *testing.T, dir string) { overwrite(t, dir, "member/snap/db", 0, 8192, garbage) }, ErrDamaged},
		{"log's first 4 KiB overwritten", func(t *testing.T, dir string) { overwriteWALs(t, dir, garbage) }, ErrDamaged},
		{"log's first 4 KiB zeroed", func(t *testing.T, dir string) { overwriteWALs(t, dir, zeros) }, ErrDamaged},
		{"log's metadata record altered", func(t *testing.T, dir string) { overwriteWALs(t, dir, flipByte(30)) }, ErrDamaged},
		{"first 4 KiB of every file overwritten", overwriteEveryFile, ErrDamaged},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, base)
			c.damage(t, dir)
			err := Check("8e9e05c52164694d", dir)
			if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("Check = %v; want %v", err, c.want)
			}
			if err != nil && !strings.Contains(err.Error(), "8e9e05c52164694d") {
				t.Errorf("the refusal does not name the member: %v", err)
			}
			started, out := etcdStarts(t, dir)
			if started != (c.want == nil) {
				t.Errorf("the guard says %v, but etcd started on the directory: %t\n%s", err, started, out)
			}
		})
	}
}

// The guard's refusal reaches the member controller as the first line of
// the container's termination message.
func TestDamagedRefusalStartsWithItsSignature(t *testing.T) {
	dir := etcdDataDir(t)
	remove(t, dir, "member/snap/db")
	err := Check("8e9e05c52164694d", dir)
	if err == nil || !strings.HasPrefix(err.Error(), RefusalDamaged) {
		t.Fatalf("Check = %v; want a line beginning %q", err, RefusalDamaged)
	}
	if !strings.Contains(err.Error(), "member/snap/db") {
		t.Errorf("the refusal does not say what is damaged: %v", err)
	}
}

// A start in a Pod that saw the log refuses a damaged directory even before
// the member ID reached the Pod; a member that never ran is not checked.
func TestGuardRefusesDamageAfterTheLogWasSeen(t *testing.T) {
	data, state := etcdDataDir(t), t.TempDir()
	if err := Guard("", data, state); err != nil {
		t.Fatalf("a start with a healthy log: %v", err)
	}
	overwriteWALs(t, data, garbage)
	if err := Guard("", data, state); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a restart in the same Pod on a damaged log: %v, want refused", err)
	}
	if err := Guard("", data, t.TempDir()); err != nil {
		t.Fatalf("a member that never ran (no ID, no mark): %v", err)
	}
}

// etcdStartHelperEnv names the data directory the child process runs etcd
// on (see TestEtcdStartHelper).
const etcdStartHelperEnv = "DATAGUARD_ETCD_START_DIR"

// etcdMemberName is the name the member of every test directory runs
// under.
const etcdMemberName = "guard"

// TestEtcdStartHelper is not a test: run as a child process by etcdStarts,
// it starts etcd on the directory it is given and exits with 0 once etcd
// serves, or otherwise when etcd fails (etcd exits or panics by itself on
// data it cannot use).
func TestEtcdStartHelper(t *testing.T) {
	dir := os.Getenv(etcdStartHelperEnv)
	if dir == "" {
		t.Skip("run by etcdStarts in a child process")
	}
	e, err := embed.StartEtcd(etcdConfig(t, dir, zap.NewNop()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd did not start:", err)
		os.Exit(3)
	}
	select {
	case <-e.Server.ReadyNotify():
		os.Exit(0)
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd failed:", err)
		os.Exit(4)
	case <-time.After(20 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd did not serve within 20 s")
		os.Exit(5)
	}
}

// etcdStarts runs etcd on dir in a child process (etcd panics or exits the
// process on data it cannot use) and reports whether it came up, with its
// output.
func etcdStarts(t *testing.T, dir string) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEtcdStartHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), etcdStartHelperEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("etcd neither came up nor failed within a minute:\n%s", tail(out))
	}
	return err == nil, tail(out)
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// fixture is the data directory etcd wrote once for the package's tests;
// each test works on a copy.
var fixture struct {
	once sync.Once
	dir  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		_ = os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// etcdDataDir returns a copy of a data directory etcd wrote: a one-member
// cluster that took snapshots (its log begins after one, as a long-lived
// member's does, so etcd cannot rebuild its backend from the log alone)
// and stopped.
func etcdDataDir(t *testing.T) string {
	t.Helper()
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "dataguard-etcd-")
		if err != nil {
			t.Fatal(err)
		}
		writeEtcdData(t, dir)
		fixture.dir = dir
	})
	if fixture.dir == "" {
		t.Fatal("etcd did not write its data directory (see the first test that asked)")
	}
	return copyDir(t, fixture.dir)
}

func writeEtcdData(t *testing.T, dir string) {
	t.Helper()
	cfg := etcdConfig(t, dir, zap.NewNop())
	cfg.SnapshotCount = 10
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd did not start")
	}
	c := v3client.New(e.Server)
	defer func() { _ = c.Close() }()
	for i := range 40 {
		if _, err := c.Put(context.Background(), fmt.Sprintf("key-%02d", i), strings.Repeat("v", 100)); err != nil {
			t.Fatal(err)
		}
	}
}

func etcdConfig(t *testing.T, dir string, lg *zap.Logger) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = etcdMemberName
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	peer := url.URL{Scheme: "http", Host: freeAddr(t)}
	client := url.URL{Scheme: "http", Host: freeAddr(t)}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = etcdMemberName + "=" + peer.String()
	cfg.ListenMetricsUrls = nil
	return cfg
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func remove(t *testing.T, dir, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, dir, rel string, size int64) {
	t.Helper()
	if err := os.Truncate(filepath.Join(dir, rel), size); err != nil {
		t.Fatal(err)
	}
}

// Ways to overwrite n bytes read at off.
var (
	garbage = func(b []byte) {
		r := rand.New(rand.NewPCG(41, 7))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
	}
	zeros    = func(b []byte) { clear(b) }
	flipByte = func(i int) func([]byte) { return func(b []byte) { b[i] ^= 0xff } }
)

// overwrite rewrites up to n bytes of a file at off in place.
func overwrite(t *testing.T, dir, rel string, off, n int64, how func([]byte)) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, min(n, info.Size()-off))
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	how(b)
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// overwriteWALs rewrites the first 4 KiB of every log file.
func overwriteWALs(t *testing.T, dir string, how func([]byte)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no log files in %s: %v", dir, err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		overwrite(t, dir, rel, 0, 4096, how)
	}
}

// overwriteEveryFile rewrites the first 4 KiB of every file in the data
// directory, as seen on real nodes.
func overwriteEveryFile(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		overwrite(t, dir, rel, 0, 4096, garbage)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Whatever the bytes, the checks answer (a refusal or a pass) and never
// panic: the guard runs before etcd on data nobody vouches for.
func FuzzDamageNeverPanics(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0x06, 0, 0, 0, 0, 0, 0, 0x84, 0x08, 0x04, 0x10, 0x00, 0x1a, 0x00}, make([]byte, 8192))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1}, []byte{0xed, 0xda, 0x0c, 0xed})
	f.Fuzz(func(t *testing.T, wal, db []byte) {
		dir := t.TempDir()
		for rel, b := range map[string][]byte{"member/wal/0000000000000000-0000000000000000.wal": wal, "member/snap/db": db} {
			path := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := damage(dir); err != nil {
			t.Fatalf("damage: %v", err)
		}
	})
}
