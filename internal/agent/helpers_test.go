package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// quiet is the agents' logger in tests.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

// testEtcd is a real etcd server (embedded) on loopback.
type testEtcd struct {
	endpoint string
	access   EtcdAccess // what a client of it needs
	server   *embed.Etcd
}

// etcdOption changes an embedded server's configuration before it starts.
type etcdOption func(t *testing.T, cfg *embed.Config, e *testEtcd)

// withClientTLS serves the client plane with TLS and client certificate
// auth; the agent gets the CA and a client certificate.
func withClientTLS(t *testing.T, cfg *embed.Config, e *testEtcd) {
	dir := t.TempDir()
	ca := newCA(t)
	ca.write(t, dir, "server", []string{"localhost"}, true)
	ca.write(t, dir, "client", nil, false)
	cfg.ClientTLSInfo.CertFile = filepath.Join(dir, "server.crt")
	cfg.ClientTLSInfo.KeyFile = filepath.Join(dir, "server.key")
	cfg.ClientTLSInfo.TrustedCAFile = filepath.Join(dir, "ca.crt")
	cfg.ClientTLSInfo.ClientCertAuth = true
	e.access.CAFile = filepath.Join(dir, "ca.crt")
	e.access.CertFile = filepath.Join(dir, "client.crt")
	e.access.KeyFile = filepath.Join(dir, "client.key")
}

// startEtcd starts an embedded etcd on free loopback ports. A port found
// free can be taken by another process before etcd binds it: that start is
// retried on other ports.
func startEtcd(t *testing.T, opts ...etcdOption) *testEtcd {
	t.Helper()
	for attempt := 1; ; attempt++ {
		e, err := tryStartEtcd(t, opts)
		if err == nil {
			return e
		}
		if attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

func tryStartEtcd(t *testing.T, opts []etcdOption) (*testEtcd, error) {
	t.Helper()
	e := &testEtcd{}
	cfg := embed.NewConfig()
	cfg.Name = "e"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer := "http://" + freeAddr(t)
	cfg.ListenPeerUrls = []url.URL{mustURL(peer)}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = "e=" + peer
	cfg.ListenMetricsUrls = nil
	for _, o := range opts {
		o(t, cfg, e)
	}
	scheme := "http"
	if cfg.ClientTLSInfo.CertFile != "" {
		scheme = "https"
	}
	e.endpoint = scheme + "://localhost:" + portOf(t, freeAddr(t))
	cfg.ListenClientUrls = []url.URL{mustURL(e.endpoint)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	e.access.Endpoints = []string{e.endpoint}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("embedded etcd did not start")
	}
	e.server = srv
	return e, nil
}

func portOf(t *testing.T, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// client connects to the server as the agent would.
func (e *testEtcd) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := dialEtcd(context.Background(), e.access)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fill writes n keys e2e/<i> with values v<i>-<padding>.
func fill(t *testing.T, c *clientv3.Client, n, valueSize int) map[string]string {
	t.Helper()
	want := map[string]string{}
	pad := make([]byte, valueSize)
	for i := range pad {
		pad[i] = 'a' + byte(i%26)
	}
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("key/%06d", i), fmt.Sprintf("v%d-%s", i, pad)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, k, v)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	return want
}

// enableAuth creates root with the password and turns authentication on.
func enableAuth(t *testing.T, c *clientv3.Client, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", password); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// testMinIO is one real MinIO server for the package's tests.
type testMinIO struct {
	endpoint       string
	access, secret string
	admin          *minio.Client
	cmd            *exec.Cmd
	dir            string // its data, removed when it stops
	startErr       error
	buckets        int
	mu             sync.Mutex
}

var (
	minioOnce sync.Once
	theMinIO  = &testMinIO{access: "agent-test", secret: "agent-test-secret"}
)

// startMinIO returns the package's MinIO, started on first use from the
// toolchain (hack/tools.sh builds it).
func startMinIO(t *testing.T) *testMinIO {
	t.Helper()
	minioOnce.Do(theMinIO.start)
	if theMinIO.startErr != nil {
		t.Fatalf("starting MinIO: %v", theMinIO.startErr)
	}
	return theMinIO
}

func (m *testMinIO) start() {
	bin, err := tools.BinDir()
	if err != nil {
		m.startErr = err
		return
	}
	dir, err := os.MkdirTemp("", "agent-minio-")
	if err != nil {
		m.startErr = err
		return
	}
	m.dir = dir
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.startErr = err
		return
	}
	addr := l.Addr().String()
	_ = l.Close()
	m.endpoint = "http://" + addr
	m.cmd = exec.Command(filepath.Join(bin, "minio"), "server", dir, "--address", addr, "--console-address", "127.0.0.1:0", "--quiet")
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.access, "MINIO_ROOT_PASSWORD="+m.secret, "MINIO_BROWSER=off")
	if m.startErr = m.cmd.Start(); m.startErr != nil {
		return
	}
	m.admin, m.startErr = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(m.access, m.secret, "")})
	if m.startErr != nil {
		return
	}
	m.startErr = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := m.admin.ListBuckets(ctx)
		return err == nil, nil
	})
}

func (m *testMinIO) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
	}
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
	}
}

// bucket makes a new, empty bucket.
func (m *testMinIO) bucket(t *testing.T) string {
	t.Helper()
	m.mu.Lock()
	m.buckets++
	name := fmt.Sprintf("bucket-%d", m.buckets)
	m.mu.Unlock()
	if err := m.admin.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// s3 is a location in a bucket of the server with working credentials.
func (m *testMinIO) s3(bucket, key string) Location {
	return Location{Kind: "s3", S3: S3Config{
		Endpoint: m.endpoint, Bucket: bucket, Key: key, ForcePathStyle: true, AccessKey: m.access, SecretKey: m.secret,
	}}
}

func TestMain(m *testing.M) {
	code := m.Run()
	theMinIO.stop()
	os.Exit(code)
}

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// write issues <name>.crt and <name>.key into dir (and ca.crt).
func (ca *testCA) write(t *testing.T, dir, name string, dns []string, server bool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string][]byte{
		name + ".crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		name + ".key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"ca.crt":      ca.pem,
	} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// etcdutl is the etcdutl of one etcd release of the toolchain.
func etcdutl(t *testing.T, version string) string {
	t.Helper()
	dir, err := tools.EtcdDir(version)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "etcdutl")
}

// readAll reads every key of a data directory by starting etcd on it.
func readAll(t *testing.T, dataDir, name, peerURL, user, password string) map[string]string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenPeerUrls = []url.URL{mustURL(peerURL)}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = name + "=" + peerURL
	client := "http://" + freeAddr(t)
	cfg.ListenClientUrls = []url.URL{mustURL(client)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenMetricsUrls = nil
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd did not start on the restored data directory")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "key/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got
}
