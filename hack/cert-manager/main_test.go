package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
)

// The tests run cert-manager-controller, built from this module, as a process
// against a real kube-apiserver and etcd from the project's toolchain, with
// cert-manager's CRDs from the module's deploy/crds installed.
var (
	kube kubernetes.Interface
	cm   cmclient.Interface
	// clusterResourceNamespace holds the Secrets of ClusterIssuers, as
	// --cluster-resource-namespace tells the controller.
	clusterResourceNamespace = "cert-manager"
	// controllerLog collects the controller's output for failure dumps.
	controllerLog = &syncBuffer{}
	// scratch holds the kubeconfig and the built binary; removed at the end.
	scratch string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if scratch, err = os.MkdirTemp("", "cert-manager-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	env, kubeconfig, err := startAPIServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := createNamespace(clusterResourceNamespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := startController(kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, controllerLog.String())
		return 1
	}
	code := m.Run()
	stop()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "--- cert-manager-controller log ---")
		fmt.Fprintln(os.Stderr, controllerLog.String())
	}
	return code
}

// startAPIServer starts etcd and kube-apiserver with cert-manager's CRDs and
// returns a kubeconfig of a cluster-admin user for the controller.
func startAPIServer() (*envtest.Environment, string, error) {
	bin, err := toolsBinDir()
	if err != nil {
		return nil, "", err
	}
	crds, err := certManagerCRDDir()
	if err != nil {
		return nil, "", err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{crds},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, "", fmt.Errorf("starting kube-apiserver: %w", err)
	}
	user, err := env.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return env, "", err
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return env, "", err
	}
	kubeconfig := filepath.Join(scratch, "kubeconfig")
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		return env, "", err
	}
	if kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return env, "", err
	}
	if cm, err = cmclient.NewForConfig(cfg); err != nil {
		return env, "", err
	}
	return env, kubeconfig, nil
}

// toolsBinDir finds kube-apiserver and etcd the way the operator's API tests
// do: ETCD_OPERATOR_TOOLS_BIN, or hack/tools.sh --dir.
func toolsBinDir() (string, error) {
	dir := os.Getenv("ETCD_OPERATOR_TOOLS_BIN")
	if dir == "" {
		out, err := exec.Command(filepath.Join("..", "tools.sh"), "--dir").Output()
		if err != nil {
			return "", fmt.Errorf("locating the toolchain with hack/tools.sh --dir: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s is missing from %s: run `make tools` first", name, dir)
		}
	}
	return dir, nil
}

// certManagerCRDDir is deploy/crds of the cert-manager module this module
// requires, so the CRDs always match the controllers' API types.
func certManagerCRDDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// startController builds this module's binary (or takes
// CERT_MANAGER_CONTROLLER) and runs it until the returned stop is called,
// after waiting for its /readyz.
func startController(kubeconfig string) (stop func(), err error) {
	binary := os.Getenv("CERT_MANAGER_CONTROLLER")
	if binary == "" {
		binary = filepath.Join(scratch, "cert-manager-controller")
		build := exec.Command("go", "build", "-o", binary, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building cert-manager-controller: %w\n%s", err, out)
		}
	}
	health, err := freeAddress()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary,
		"--kubeconfig", kubeconfig,
		"--cluster-resource-namespace", clusterResourceNamespace,
		"--health-address", health,
		"--v", "2")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = controllerLog, controllerLog
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	stop = func() { cancel(); _ = cmd.Wait() }
	if err := waitReady("http://"+health+"/readyz", time.Minute); err != nil {
		stop()
		return nil, fmt.Errorf("cert-manager-controller never became ready: %w", err)
	}
	return stop, nil
}

func waitReady(url string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url) //nolint:gosec // a loopback address the test chose
		if err != nil {
			last = err
			return false, nil
		}
		_ = resp.Body.Close()
		last = fmt.Errorf("%s answered %s", url, resp.Status)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// freeAddress returns a loopback address with a port nothing listens on.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

func createNamespace(name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	return err
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-"}}
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// syncBuffer is a bytes.Buffer safe for the controller's two output streams.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
