package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Tarball is an image file ready to import and the references it carries.
type Tarball struct {
	File string
	Refs []string
	// System marks the images a node needs before it runs any Pod: the Pod
	// sandbox and CoreDNS.
	System bool
}

// Pause is the reference of the sandbox's pause image; the nodes' containerd
// uses it for every Pod sandbox and never garbage-collects it.
const Pause = "registry.k8s.io/pause:3.10-sandbox"

// CoreDNS is the reference of the cluster DNS image built from the
// toolchain's CoreDNS (its version is the name of the directory bin/coredns
// links into).
func CoreDNS(toolsRoot string) (string, error) {
	target, err := filepath.EvalSymlinks(filepath.Join(toolsRoot, "bin", "coredns"))
	if err != nil {
		return "", fmt.Errorf("CoreDNS is not in the toolchain: %w (run `make tools`)", err)
	}
	return "registry.k8s.io/coredns/coredns:" + filepath.Base(filepath.Dir(target)), nil
}

// EtcdRefs are the references of one etcd release, as upstream publishes it.
func EtcdRefs(version string) []string {
	return []string{
		"quay.io/coreos/etcd:v" + version,
		"gcr.io/etcd-development/etcd:v" + version,
		"registry.k8s.io/etcd:" + version + "-0",
	}
}

// etcdBinaries are the files of an etcd release image.
var etcdBinaries = []string{"etcd", "etcdctl", "etcdutl"}

// accounts are the users and groups of the distroless-like images.
var accounts = map[string]string{
	"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
	"etc/group":  "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
}

// Builtins returns (building once, into toolsRoot/sandbox-images) the image
// of every etcd release in the toolchain, the pause image, the CoreDNS image,
// the MinIO image and a kubectl image. A tarball is named after the modification time of its binaries, so
// a rebuilt tool gets a new image.
func Builtins(toolsRoot string) ([]Tarball, error) {
	entries, err := os.ReadDir(filepath.Join(toolsRoot, "etcd"))
	if err != nil {
		return nil, fmt.Errorf("listing etcd releases in the toolchain: %w", err)
	}
	var out []Tarball
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "v") {
			continue
		}
		t, err := etcdImage(toolsRoot, strings.TrimPrefix(e.Name(), "v"))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	bin := filepath.Join(toolsRoot, "bin")
	pause, err := cached(toolsRoot, "pause", Spec{
		Refs:   []string{Pause},
		Files:  map[string]string{"pause": filepath.Join(bin, "pause")},
		Config: v1.Config{Entrypoint: []string{"/pause"}},
	})
	if err != nil {
		return nil, err
	}
	dnsRef, err := CoreDNS(toolsRoot)
	if err != nil {
		return nil, err
	}
	dns, err := cached(toolsRoot, "coredns-"+dnsRef[strings.LastIndex(dnsRef, ":")+1:], Spec{
		Refs:   []string{dnsRef},
		Files:  map[string]string{"coredns": filepath.Join(bin, "coredns")},
		Dirs:   map[string]os.FileMode{"etc": 0o755},
		Text:   accounts,
		Config: v1.Config{Entrypoint: []string{"/coredns"}},
	})
	if err != nil {
		return nil, err
	}
	pause.System, dns.System = true, true
	minio, err := minioImage(toolsRoot)
	if err != nil {
		return nil, err
	}
	kubectl, err := kubectlImage(toolsRoot)
	if err != nil {
		return nil, err
	}
	return append(out, pause, dns, minio, kubectl), nil
}

// etcdImage is like the upstream distroless image: the binaries in
// /usr/local/bin, /tmp, users root and nonroot, no shell, CMD etcd.
func etcdImage(toolsRoot, version string) (Tarball, error) {
	files := map[string]string{}
	for _, b := range etcdBinaries {
		files["usr/local/bin/"+b] = filepath.Join(toolsRoot, "etcd", "v"+version, b)
	}
	return cached(toolsRoot, "etcd-v"+version, Spec{
		Refs:  EtcdRefs(version),
		Files: files,
		Text:  accounts,
		Dirs: map[string]os.FileMode{
			"etc": 0o755, "usr": 0o755, "usr/local": 0o755, "usr/local/bin": 0o755, "tmp": 0o777 | os.ModeSticky,
			"var": 0o755, "var/lib": 0o755, "home": 0o755, "home/nonroot": 0o700, "root": 0o700,
		},
		Owners: map[string][2]int{"home/nonroot": {65532, 65532}},
		Config: v1.Config{Cmd: []string{"/usr/local/bin/etcd"}},
	})
}

// cached writes the image unless a tarball for the same binaries exists.
func cached(toolsRoot, base string, spec Spec) (Tarball, error) {
	var stamp int64
	for _, src := range spec.Files {
		info, err := os.Stat(src)
		if err != nil {
			return Tarball{}, fmt.Errorf("image %s: %w (run `make tools`)", base, err)
		}
		stamp = max(stamp, info.ModTime().UnixNano())
	}
	refs := make([]string, len(spec.Refs))
	for i, r := range spec.Refs {
		n, err := Normalize(r)
		if err != nil {
			return Tarball{}, err
		}
		refs[i] = n
	}
	file := filepath.Join(toolsRoot, "sandbox-images", fmt.Sprintf("%s-%x.tar", base, stamp))
	if exists(file) {
		return Tarball{File: file, Refs: refs}, nil
	}
	if err := Write(spec, file); err != nil {
		return Tarball{}, fmt.Errorf("writing image %s: %w", base, err)
	}
	return Tarball{File: file, Refs: refs}, nil
}
