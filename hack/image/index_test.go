package main

import (
	"archive/tar"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
)

// TestMultiPlatformIndex packs two platforms into an OCI layout tarball and
// reads it back: one index naming the reference, one manifest per platform,
// each image's config saying its platform and running the binary as the
// non-root user; the sandbox's image loader finds the reference.
func TestMultiPlatformIndex(t *testing.T) {
	dir := t.TempDir()
	amd, arm := filepath.Join(dir, "amd64"), filepath.Join(dir, "arm64")
	for _, f := range []string{amd, arm} {
		if err := os.WriteFile(f, []byte("binary for "+filepath.Base(f)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "image.oci.tar")
	const ref = "ghcr.io/example/etcd-operator:v1.2.3"
	if err := buildIndex([]string{"linux/amd64=" + amd, "linux/arm64=" + arm}, ref, out); err != nil {
		t.Fatal(err)
	}
	refs, err := images.Refs(out)
	if err != nil || !slices.Contains(refs, ref) {
		t.Fatalf("the sandbox reads references %v (%v), want %s", refs, err, ref)
	}
	got := platformsOf(t, out, filepath.Join(dir, "layout"))
	if !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", got)
	}
	if err := buildIndex([]string{"linux/amd64"}, ref, out); err == nil {
		t.Error("a platform without a binary was accepted")
	}
}

// TestPushSendsThePlatformIndex pushes a built index to a registry (an
// in-process one) and pulls it back: the reference names the
// multi-platform index itself, and a pull for arm64 gets the arm64 image.
func TestPushSendsThePlatformIndex(t *testing.T) {
	dir := t.TempDir()
	var ps []string
	for _, arch := range []string{"amd64", "arm64"} {
		f := filepath.Join(dir, arch)
		if err := os.WriteFile(f, []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, "linux/"+arch+"="+f)
	}
	out := filepath.Join(dir, "image.oci.tar")
	if err := buildIndex(ps, "ghcr.io/example/etcd-operator:v1", out); err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/etcd-operator:v1"
	pushed, err := push(out, ref, remote.WithAuth(authn.Anonymous))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(ref, ":v1") + "@sha256:"; !strings.HasPrefix(pushed, want) {
		t.Errorf("push says it pushed %s, want %s<digest>", pushed, want)
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(parsed)
	if err != nil {
		t.Fatal(err)
	}
	if !desc.MediaType.IsIndex() {
		t.Fatalf("%s is a %s, want an image index", ref, desc.MediaType)
	}
	img, err := remote.Image(parsed, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	if err != nil {
		t.Fatalf("no linux/arm64 image under %s: %v", ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil || cfg.Architecture != "arm64" {
		t.Errorf("the linux/arm64 pull got %+v (%v)", cfg, err)
	}
	if _, err := push(filepath.Join(dir, "missing.tar"), ref, remote.WithAuth(authn.Anonymous)); err == nil {
		t.Error("pushing a missing tarball succeeded")
	}
}

// platformsOf unpacks an OCI layout tarball into dir and lists the
// platforms of its one image index, checking each image's config.
func platformsOf(t *testing.T, out, unpacked string) []string {
	t.Helper()
	if err := untar(out, unpacked); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.FromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil || len(om.Manifests) != 1 {
		t.Fatalf("the layout lists %+v (%v), want one index", om, err)
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range im.Manifests {
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS+"/"+cfg.Architecture != got[len(got)-1] || cfg.Config.User != nonroot+":"+nonroot || !slices.Equal(cfg.Config.Entrypoint, []string{"/manager"}) {
			t.Errorf("image for %s has config %+v", got[len(got)-1], cfg)
		}
	}
	return got
}

// TestImageCarriesTools: the image holds /manager and, when given, the small
// binary member Pods run, /etcd-tools.
func TestImageCarriesTools(t *testing.T) {
	dir := t.TempDir()
	bin, tools := filepath.Join(dir, "manager"), filepath.Join(dir, "tools")
	for _, f := range []string{bin, tools} {
		if err := os.WriteFile(f, []byte("binary "+filepath.Base(f)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		tools string
		want  []string
	}{{tools, []string{"manager", "etcd-tools"}}, {"", []string{"manager"}}} {
		img, err := image(bin, tc.tools, "linux", "amd64")
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("layers %v (%v), want one", layers, err)
		}
		if files := binariesOf(t, layers[0]); !slices.Equal(files, tc.want) {
			t.Errorf("with tools %q the image holds %v, want %v", tc.tools, files, tc.want)
		}
	}
}

// binariesOf lists the regular files of a layer outside /etc.
func binariesOf(t *testing.T, layer v1.Layer) []string {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var files []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return files
		}
		if h.Typeflag == tar.TypeReg && !strings.HasPrefix(h.Name, "etc/") {
			files = append(files, h.Name)
		}
	}
}
