// Package api tests the CustomResourceDefinitions on a real kube-apiserver
// from the pinned toolchain: CEL rules, defaults, /scale and printer columns;
// and what the operator's controllers need of the API server itself, such
// as discovering cert-manager after they started.
package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// k is a client of the test API server, shared by every test in the package.
var k client.Client

// restConfig reaches the test API server; scheme knows the operator's kinds.
var (
	restConfig *rest.Config
	scheme     = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Controllers run in some tests; their logs are kept for failures.
	ctrl.SetLogger(zap.New(zap.WriteTo(operatorLogs)))
	bin, err := tools.BinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(tools.RepoRoot(), "charts", "etcd-operator", "crd-bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting kube-apiserver:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restConfig = cfg

	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha2.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	k, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// logBuffer collects the controllers' logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

var operatorLogs = &logBuffer{}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns the logs, of every test so far.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// namespace creates a fresh namespace for one test, so tests never see each
// other's objects.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.GenerateName = "api-"
	if err := k.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// newManager makes a controller manager on the test API server whose cache
// holds one namespace, with the operator's field indexes; cancel stops it
// once started.
func newManager(t *testing.T, ns string) (ctrl.Manager, context.Context, context.CancelFunc) {
	t.Helper()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	return mgr, ctx, cancel
}

// noEtcd is the controllers' dialer in the API tests, where no etcd runs.
func noEtcd(context.Context, etcd.Config) (etcd.Client, error) {
	return nil, errors.New("no etcd runs in the API tests")
}
