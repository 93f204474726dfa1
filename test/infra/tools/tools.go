// Package tools locates the pinned toolchain that hack/tools.sh builds: the
// Kubernetes control plane and the etcd releases the project supports; and
// cert-manager's CRDs, from the Go module cache.
package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BinDir returns the directory holding kube-apiserver, etcd and friends. It
// honours ETCD_OPERATOR_TOOLS_BIN (set by the Makefile), and otherwise asks
// hack/tools.sh, which knows the cache layout. It fails with a message that
// says how to build the tools, never silently.
func BinDir() (string, error) {
	dir := os.Getenv("ETCD_OPERATOR_TOOLS_BIN")
	if dir == "" {
		out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "tools.sh"), "--dir").Output()
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

// EtcdDir returns the directory of one etcd release in the toolchain.
func EtcdDir(version string) (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(filepath.Dir(bin), "etcd", "v"+version)
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		return "", fmt.Errorf("etcd %s is not in the toolchain (%s): add it to hack/versions.env and run `make tools`", version, dir)
	}
	return dir, nil
}

// RepoRoot returns the root of the source tree this package was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// certManagerModule is the Go module whose source holds cert-manager's CRDs.
const certManagerModule = "github.com/cert-manager/cert-manager"

// CertManagerCRDs returns the directory of cert-manager's CustomResourceDefinitions
// (deploy/crds of its source) at the version hack/versions.env pins. The
// module comes through the Go module proxy into the module cache with
// `go mod download`, run outside this module so go.mod stays as it is; a
// warm cache makes no request.
func CertManagerCRDs() (string, error) {
	version, err := Pinned("CERT_MANAGER_VERSION")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "mod", "download", "-json", certManagerModule+"@"+version)
	cmd.Dir = os.TempDir()
	out, runErr := cmd.Output()
	// A failed download still prints its JSON, with the reason in Error.
	var mod struct{ Dir, Error string }
	parseErr := json.Unmarshal(out, &mod)
	switch {
	case mod.Error != "":
		return "", fmt.Errorf("go mod download %s@%s: %s", certManagerModule, version, mod.Error)
	case runErr != nil:
		return "", fmt.Errorf("go mod download %s@%s: %w %s", certManagerModule, version, runErr, stderrOf(runErr))
	case parseErr != nil:
		return "", fmt.Errorf("go mod download %s@%s: %w", certManagerModule, version, parseErr)
	}
	dir := filepath.Join(mod.Dir, "deploy", "crds")
	if _, err := os.Stat(filepath.Join(dir, "cert-manager.io_certificates.yaml")); err != nil {
		return "", fmt.Errorf("cert-manager %s has no Certificate CRD where expected: %w", version, err)
	}
	return dir, nil
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return strings.TrimSpace(string(exit.Stderr))
	}
	return ""
}

// Pinned returns a version hack/versions.env pins (KEY=value; quotes dropped).
func Pinned(key string) (string, error) {
	conf, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "versions.env"))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(conf)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && k == key {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", fmt.Errorf("hack/versions.env pins no %s", key)
}
