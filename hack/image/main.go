// Command image packs a static binary into an OCI image tarball that `docker
// load` (and `sandbox image load`) accepts, with no container engine: a
// single layer holding the binary (/manager), the small binary member Pods
// run (/etcd-tools, with --tools) and a passwd entry for the non-root user.
//
//	go run ./hack/image --binary bin/manager --tools bin/etcd-tools --ref ghcr.io/x/etcd-operator:dev --out bin/etcd-operator-image.tar
//
// With --platform (repeated) it packs one image per platform into a
// multi-platform OCI image index instead, written as an OCI layout tarball
// (what `crane push`, `skopeo copy oci-archive:` and containerd import):
//
//	go run ./hack/image --platform linux/amd64=bin/m-amd64,bin/t-amd64 --platform linux/arm64=bin/m-arm64,bin/t-arm64 \
//		--ref ghcr.io/x/etcd-operator:v1 --out dist/etcd-operator-image.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonroot is the user the operator runs as, the same as distroless's.
const nonroot = "65532"

// platforms collects --platform os/arch=binary flags.
type platforms []string

func (p *platforms) String() string     { return strings.Join(*p, ",") }
func (p *platforms) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	binary := flag.String("binary", "bin/manager", "static binary to put at /manager")
	tools := flag.String("tools", "", "static binary to put at /etcd-tools (none when empty)")
	ref := flag.String("ref", "ghcr.io/seed74754924/etcd-operator:dev", "image reference to tag the image with")
	out := flag.String("out", "bin/etcd-operator-image.tar", "tarball to write")
	var ps platforms
	flag.Var(&ps, "platform", "os/arch=binary[,tools]: one image of a multi-platform index (repeat); the output is then an OCI layout tarball")
	pushFrom := flag.String("push", "", "an OCI layout tarball written with --platform: push its image index to --ref instead of building, and print it as <repository>@<digest>")
	flag.Parse()
	var err error
	printed := *ref
	switch {
	case *pushFrom != "":
		printed, err = push(*pushFrom, *ref)
	case len(ps) > 0:
		err = buildIndex(ps, *ref, *out)
	default:
		err = build(*binary, *tools, *ref, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Println(printed)
}

func build(binary, tools, ref, out string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("bad reference %q: %w", ref, err)
	}
	img, err := image(binary, tools, "linux", "amd64")
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}

// image is the operator image for one platform; tools is the etcd-tools
// binary, or "" for none.
func image(binary, tools, goos, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var toolsBin []byte
	if tools != "" {
		if toolsBin, err = os.ReadFile(tools); err != nil {
			return nil, err
		}
	}
	layerTar, err := rootfs(bin, toolsBin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = goos, arch
	cfg.Config = v1.Config{
		Entrypoint: []string{"/manager"},
		User:       nonroot + ":" + nonroot,
		WorkingDir: "/",
		Env:        []string{"PATH=/"},
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/seed74754924/etcd-operator"},
	}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the single layer: /manager, /etcd-tools (when given),
// /etc/passwd and /etc/group naming the non-root user, and a writable /tmp.
func rootfs(bin, tools []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	type entry struct {
		name string
		mode int64
		data []byte
		dir  bool
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:" + nonroot + ":\n")},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "manager", mode: 0o755, data: bin},
	}
	if tools != nil {
		entries = append(entries, entry{name: "etcd-tools", mode: 0o755, data: tools})
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
