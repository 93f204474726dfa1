// Package sandbox_test tests the sandbox end to end: one sandbox (four
// nodes, each a real kubelet with its containerd; node-3 is tainted for the
// node-stop test) started once for the suite, with the real etcd images and
// a small test image, plus the `down` tests that start their own.
package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// Suite-wide state, set by TestMain.
var (
	sb         *sandbox.Sandbox
	k          kubernetes.Interface
	binary     string // the sandbox binary under test
	helperRoot string // root filesystem of the test image
)

const (
	helperImage = "sandbox.test/helper:v1"
	// stopNode is kept free of other tests' Pods by a taint.
	stopNode  = "node-3"
	taintKey  = "sandbox.test/stop-node"
	suiteDirs = "sandbox-suite-"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the sandbox tests need root (namespaces, cgroups, mounts, kubelets)")
		return 1
	}
	tmp, err := os.MkdirTemp("", suiteDirs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// Readable by everyone: TestNotRoot runs the binary as nobody.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := build(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	sb, err = sandbox.Up(ctx, sandbox.Config{Dir: filepath.Join(tmp, "sb"), Nodes: 4, Binary: binary})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the sandbox:", err)
		return 1
	}
	fmt.Printf("sandbox %s up in %s\n", sb.Name(), time.Since(start).Round(time.Millisecond))
	defer func() {
		if err := sb.Down(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox down:", err)
		}
	}()
	if err := prepareSuite(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// build compiles the sandbox binary and the test image.
func build(tmp string) error {
	binary = filepath.Join(tmp, "sandbox")
	helperRoot = filepath.Join(tmp, "helper-root")
	for _, b := range []struct{ out, pkg string }{
		{binary, "./cmd/sandbox"},
		{filepath.Join(helperRoot, "bin", "helper"), "./test/sandbox/helper"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = tools.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", b.pkg, err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(helperRoot, "etc"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(helperRoot, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(helperRoot, "tmp"), 0o1777); err != nil {
		return err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	return os.WriteFile(filepath.Join(helperRoot, "etc", "passwd"), []byte(passwd), 0o644)
}

// prepareSuite imports the test image into every node and reserves node-3.
func prepareSuite(ctx context.Context) error {
	cfg, err := sb.RESTConfig()
	if err != nil {
		return err
	}
	if k, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := sb.AddImage(ctx, helperImage, helperRoot); err != nil {
		return err
	}
	// The kubelet writes the Node's status meanwhile (the image just added
	// among others), so an update may meet a newer version: read again.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := k.CoreV1().Nodes().Get(ctx, stopNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: taintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		_, err = k.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}
