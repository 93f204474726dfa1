// Package e2e runs the operator, installed from its Helm chart, on a sandbox
// with real etcd processes: one sandbox for every suite, each suite in its own
// namespace, each checking that a client's acknowledged writes survive.
//
// With E2E_TIER=integration the same suites run instead on the integration
// tier's Kubernetes (package procnode): the real control plane, and nodes
// that run Pods as processes. Only the suites that need no real node run
// there (the Makefile's INTEGRATION list); a suite that reaches for the
// sandbox (a fault, an image load) fails there rather than passing unseen.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/test/infra/procnode"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// Suite-wide state, set by TestMain.
var (
	sb    *sandbox.Sandbox
	k     client.Client
	cs    kubernetes.Interface
	image string // the operator image loaded into the sandbox
	// faultsImage is the same operator built with fault injection, for the
	// crash suite's own operator only; loaded by the first suite that asks
	// (faultsImageRef), so a run without it does not pay for it.
	faultsImage     string
	faultsImageOnce sync.Once
	faultsImageErr  error
	bin             string // the toolchain's bin directory (helm)
	// pn is the integration tier's Kubernetes, when the suites run there
	// instead of on sb.
	pn *procnode.Env
	// kubeconfigPath reaches whichever of the two runs the suites.
	kubeconfigPath string
)

// integration reports whether the suites run on the integration tier.
func integration() bool { return os.Getenv("E2E_TIER") == "integration" }

// envIntegrationDir carries the integration tier's directory into the copy
// of the tests that runs in its mount namespace.
const envIntegrationDir = "E2E_INTEGRATION_DIR"

const (
	operatorNS      = "etcd-operator-system"
	operatorRelease = "eo"
	// nodes: the sandbox's size. Disruptive suites (drain, node stop) run
	// first and alone; the rest share the nodes in parallel. The node-loss
	// suite needs a node for each of 3 members, one for the operator and one
	// to move to.
	nodes = 5
)

func TestMain(m *testing.M) {
	// The suites' clients log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if integration() {
		return runIntegration(m)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the end-to-end tests need root: they run on the sandbox")
		return 1
	}
	tmp, err := os.MkdirTemp("", "etcd-operator-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if !keep() {
			_ = os.RemoveAll(tmp)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := setUp(ctx, tmp); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		if sb != nil {
			out, _ := kubectl("get", "pods", "-A", "-o", "wide")
			desc, _ := kubectl("-n", operatorNS, "describe", "pods")
			fmt.Fprintf(os.Stderr, "%s\n%s\n", out, desc)
			dumpOperator()
		}
		tearDown()
		return 1
	}
	code := m.Run()
	if code != 0 {
		dumpOperator()
	}
	tearDown()
	return code
}

func setUp(ctx context.Context, tmp string) error {
	var err error
	if bin, err = tools.BinDir(); err != nil {
		return err
	}
	sb, err = sandbox.Up(ctx, sandbox.Config{Dir: filepath.Join(tmp, "sb"), Nodes: nodes, MaxBackoff: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("starting the sandbox: %w", err)
	}
	kubeconfigPath = sb.Kubeconfig()
	cfg, err := sb.RESTConfig()
	if err != nil {
		return err
	}
	if err := connect(cfg); err != nil {
		return err
	}
	tarball := filepath.Join(tools.RepoRoot(), "bin", "etcd-operator-image.tar")
	refs, err := sb.LoadImage(ctx, tarball)
	if err != nil {
		return fmt.Errorf("loading %s (run `make image`): %w", tarball, err)
	}
	image = refs[0]
	if from := upgradeFrom(); from != "" {
		return installPreviousRelease(ctx, from)
	}
	return installMainOperator(ctx)
}

// connect makes the suites' clients.
func connect(cfg *rest.Config) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		return err
	}
	var err error
	if k, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	cs, err = kubernetes.NewForConfig(cfg)
	return err
}

// installMainOperator installs the operator every suite but the crash
// suite shares.
func installMainOperator(ctx context.Context) error {
	// The main operator watches every suite's namespace but the crash
	// suite's, which runs its own operator with fault injection. Watching
	// given namespaces, the chart grants its rights by a Role in each, so
	// they exist first.
	for _, name := range append(slices.Clone(suiteNamespaces), crashNS) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := k.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if mainOperatorWatchesAll {
		return installOperator(operatorRelease, operatorNS, true, nil)
	}
	return installOperator(operatorRelease, operatorNS, true, nil, suiteNamespaces...)
}

// mainOperatorWatchesAll installs the main operator as a user would, for
// every namespace (one informer per kind), rather than for the suites'
// namespaces (one per kind and namespace). The bench, which runs no other
// operator, sets it, so that what it measures is what a fleet costs.
var mainOperatorWatchesAll bool

// faultsImageRef is the fault-injecting operator image, loaded into the
// sandbox the first time a suite asks for it.
func faultsImageRef(t *testing.T) string {
	t.Helper()
	faultsImageOnce.Do(func() {
		if faultsImage != "" {
			return
		}
		faultsTar := filepath.Join(tools.RepoRoot(), "bin", "etcd-operator-faults-image.tar")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		refs, err := sb.LoadImage(ctx, faultsTar)
		if err != nil {
			faultsImageErr = fmt.Errorf("loading %s (run `make image-faults`): %w", faultsTar, err)
			return
		}
		faultsImage = refs[0]
	})
	if faultsImageErr != nil {
		t.Fatal(faultsImageErr)
	}
	return faultsImage
}

// suiteNamespaces are the namespaces of the suites the main operator serves.
var suiteNamespaces = []string{
	"e2e-bootstrap", "e2e-scale", "e2e-pause", "e2e-tmpfs", "e2e-dataloss", "e2e-nodeloss",
	"e2e-drain", "e2e-specedit", "e2e-deadline", "e2e-deletion", "e2e-tls", "e2e-bench",
	"e2e-leader", "e2e-clientservice", "e2e-claimloss", "e2e-concurrent", "e2e-nsdelete",
	"e2e-upgrade", "e2e-versions", "e2e-settings", "e2e-rollstuck", kubectlNS,
	"e2e-snapshot", "e2e-snaptls", "e2e-rotate", "e2e-auth", "e2e-certmanager", "e2e-tlsmodes", "e2e-peercut", "e2e-snapverify", "e2e-recover", "e2e-recoversnap", "e2e-defrag", "e2e-nospace", "e2e-prom",
}

// chartPath is the chart the suites install: make test installs the one
// make release packaged (E2E_CHART), so that a file the package leaves out
// fails here.
func chartPath() string {
	chart := os.Getenv("E2E_CHART")
	switch {
	case chart == "":
		return filepath.Join(tools.RepoRoot(), "charts", "etcd-operator")
	case !filepath.IsAbs(chart):
		// Helm reads "dist/x.tgz" as a chart in a repository named dist.
		return filepath.Join(tools.RepoRoot(), chart)
	}
	return chart
}

// installOperator installs the chart as a release in ns. Only the first
// release installs the CRDs; env adds variables to the manager.
func installOperator(release, ns string, crds bool, env map[string]string, watch ...string) error {
	return installOperatorImage(image, release, ns, crds, env, watch...)
}

// installOperatorImage installs the chart with the given operator image.
func installOperatorImage(img, release, ns string, crds bool, env map[string]string, watch ...string) error {
	return installOperatorValues(img, release, ns, crds, env, nil, watch...)
}

// installOperatorValues installs the chart with the given operator image and
// more values (name=value each).
func installOperatorValues(img, release, ns string, crds bool, env map[string]string, values []string, watch ...string) error {
	return installChart(chartPath(), img, release, ns, crds, env, values, watch...)
}

// installChart installs (or upgrades to) the given chart.
func installChart(chart, img, release, ns string, crds bool, env map[string]string, values []string, watch ...string) error {
	repo, tag, _ := strings.Cut(img, ":")
	args := []string{"upgrade", "--install", release, chart,
		"--namespace", ns, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "image.repository=" + repo, "--set-string", "image.tag=" + tag,
		"--set", fmt.Sprintf("crds.enabled=%t", crds), "--set", "manager.logLevel=debug"}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	for i, w := range watch {
		args = append(args, "--set", fmt.Sprintf("manager.watchNamespaces[%d]=%s", i, w))
	}
	i := 0
	for name, value := range env {
		args = append(args, "--set", fmt.Sprintf("manager.extraEnv[%d].name=%s", i, name),
			"--set-string", fmt.Sprintf("manager.extraEnv[%d].value=%s", i, value))
		i++
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func tearDown() {
	if migrateBin != "" {
		_ = os.RemoveAll(filepath.Dir(migrateBin))
	}
	if sb == nil {
		return
	}
	if keep() {
		fmt.Fprintln(os.Stderr, "keeping the sandbox: KUBECONFIG="+kubeconfigPath)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sb.Down(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox down:", err)
	}
}

// keep reports whether the sandbox should outlive the run, to look around.
func keep() bool { return os.Getenv("E2E_KEEP_SANDBOX") != "" }

// dumpOperator prints the operator's log, for a failed run.
func dumpOperator() {
	out, _ := kubectl("-n", operatorNS, "logs", "deploy/eo-etcd-operator", "--tail=400")
	fmt.Fprintf(os.Stderr, "\n--- operator log (last 400 lines) ---\n%s\n", out)
}

// kubectl runs kubectl against the sandbox.
func kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectlStdin runs kubectl against the sandbox with stdin as its input.
func kubectlStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
