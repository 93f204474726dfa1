package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/procnode"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The operator's images on the integration tier's nodes: its binaries as
// `make manager` and `make manager-faults` build them, at the path the
// image has them.
const (
	integrationImage       = "procnode.local/etcd-operator:test"
	integrationFaultsImage = "procnode.local/etcd-operator:faults-test"
)

// runIntegration runs the suites on the integration tier: this copy of the
// tests starts them again in a mount namespace of their own (see
// procnode.Enter) and removes what they left when they are done.
func runIntegration(m *testing.M) int {
	dir := os.Getenv(envIntegrationDir)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "etcd-operator-integration-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		_ = os.Setenv(envIntegrationDir, dir)
		defer func() {
			if !keep() {
				_ = os.RemoveAll(dir)
			}
		}()
	}
	code, inside, err := procnode.Enter(filepath.Join(dir, "hosts"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !inside {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := setUpIntegration(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "integration setup:", err)
		if pn != nil {
			out, _ := kubectl("get", "pods", "-A", "-o", "wide")
			fmt.Fprintln(os.Stderr, out)
			dumpOperator()
			pn.Down()
		}
		return 1
	}
	code = m.Run()
	if code != 0 {
		dumpOperator()
	}
	if keep() {
		fmt.Fprintln(os.Stderr, "E2E_KEEP_SANDBOX does not keep the integration tier: its processes end with the tests")
	}
	pn.Down()
	return code
}

func setUpIntegration(ctx context.Context, dir string) error {
	var err error
	if bin, err = tools.BinDir(); err != nil {
		return err
	}
	envDir := filepath.Join(dir, "env")
	if err := os.MkdirAll(envDir, 0o755); err != nil {
		return err
	}
	pn, err = procnode.Up(ctx, procnode.Config{Dir: envDir, BinDir: bin, Nodes: 3})
	if err != nil {
		return err
	}
	kubeconfigPath = pn.Kubeconfig()
	if err := connect(pn.RESTConfig()); err != nil {
		return err
	}
	etcdTools := filepath.Join(tools.RepoRoot(), "bin", "etcd-tools")
	for ref, binary := range map[string]string{integrationImage: "manager", integrationFaultsImage: "manager-faults"} {
		path := filepath.Join(tools.RepoRoot(), "bin", binary)
		for _, p := range []string{path, etcdTools} {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("%s is missing: run `make manager manager-faults etcd-tools`", p)
			}
		}
		// The release image's files and user (hack/image): distroless nonroot.
		pn.AddImage(ref, procnode.Image{Files: map[string]string{"/manager": path, manifest.ToolsBinary: etcdTools},
			Entrypoint: []string{"/manager"}, User: 65532, Group: 65532})
	}
	image, faultsImage = integrationImage, integrationFaultsImage
	return installMainOperator(ctx)
}

// faultInjector is what a suite may do to a member either tier runs: kill
// a container, wipe a claim's volume.
type faultInjector interface {
	Kill(ctx context.Context, ns, pod, container string) error
	Wipe(ctx context.Context, ns, claim string) error
}

// injector is the tier the suites run on, as a fault injector.
func injector() faultInjector {
	if pn != nil {
		return pn
	}
	return sb
}
