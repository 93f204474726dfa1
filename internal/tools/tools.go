// Package tools locates the pinned toolchain that hack/tools.sh builds: the
// Kubernetes control plane and the etcd releases the project supports.
package tools

import (
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
	return filepath.Join(filepath.Dir(file), "..", "..")
}
