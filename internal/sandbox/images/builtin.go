package images

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// etcdBinaries are the files of an etcd release image.
var etcdBinaries = []string{"etcd", "etcdctl", "etcdutl"}

// Builtins returns an image for every etcd release in the toolchain (one
// directory per release under toolsRoot/etcd), under the references the
// upstream images use. Their root filesystems are made once under
// toolsRoot/sandbox-images and shared by every sandbox.
func Builtins(toolsRoot string) ([]Image, error) {
	entries, err := os.ReadDir(filepath.Join(toolsRoot, "etcd"))
	if err != nil {
		return nil, fmt.Errorf("listing etcd releases in the toolchain: %w", err)
	}
	var out []Image
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "v") {
			continue
		}
		version := strings.TrimPrefix(e.Name(), "v")
		root, err := etcdRoot(toolsRoot, version)
		if err != nil {
			return nil, err
		}
		for _, ref := range EtcdRefs(version) {
			out = append(out, Image{
				Ref: ref, Root: root, Cmd: []string{"/usr/local/bin/etcd"},
				Env: []string{DefaultPath}, Source: "toolchain etcd " + version,
			})
		}
	}
	return out, nil
}

// EtcdRefs are the references of one etcd release.
func EtcdRefs(version string) []string {
	return []string{
		"quay.io/coreos/etcd:v" + version,
		"gcr.io/etcd-development/etcd:v" + version,
		"registry.k8s.io/etcd:" + version + "-0",
	}
}

// etcdRoot builds (once) a root filesystem like the upstream distroless
// image: the binaries in /usr/local/bin, /tmp, users root and nonroot, and
// no shell.
func etcdRoot(toolsRoot, version string) (string, error) {
	root := filepath.Join(toolsRoot, "sandbox-images", "etcd-v"+version)
	if _, err := os.Stat(filepath.Join(root, "usr", "local", "bin", "etcdutl")); err == nil {
		return root, nil
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(root), ".image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := writeSkeleton(tmp); err != nil {
		return "", err
	}
	for _, bin := range etcdBinaries {
		src := filepath.Join(toolsRoot, "etcd", "v"+version, bin)
		if err := linkOrCopy(src, filepath.Join(tmp, "usr", "local", "bin", bin)); err != nil {
			return "", err
		}
	}
	// Rename makes the image appear whole; a concurrent builder's rename
	// that lost the race is fine, the image is the same.
	if err := os.Rename(tmp, root); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return "", err
	}
	return root, nil
}

func isNotEmpty(err error) bool { return strings.Contains(err.Error(), "directory not empty") }

func writeSkeleton(root string) error {
	for _, d := range []string{"usr/local/bin", "etc", "tmp", "var/lib", "home/nonroot", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chown(filepath.Join(root, "home/nonroot"), 65532, 65532); err != nil {
		return err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		"etc/group":  "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
