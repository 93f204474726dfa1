package images

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteAndRefs: an image written with several references reads back
// with every one of them, normalised, with its platform, configuration and
// files.
func TestWriteAndRefs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "image.tar")
	spec := Spec{
		Refs:   []string{"quay.io/coreos/etcd:v3.6.16", "busybox"},
		Files:  map[string]string{"usr/local/bin/tool": bin},
		Dirs:   map[string]os.FileMode{"usr": 0o755, "usr/local": 0o755, "usr/local/bin": 0o755, "tmp": 0o777 | os.ModeSticky},
		Text:   accounts,
		Config: v1.Config{Cmd: []string{"/usr/local/bin/tool"}},
	}
	if err := Write(spec, file); err != nil {
		t.Fatal(err)
	}
	refs, err := Refs(file)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(refs)
	if want := []string{"index.docker.io/library/busybox:latest", "quay.io/coreos/etcd:v3.6.16"}; !slices.Equal(refs, want) {
		t.Errorf("refs = %v, want %v", refs, want)
	}
	tag, _ := name.NewTag("quay.io/coreos/etcd:v3.6.16")
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !slices.Equal(cf.Config.Cmd, spec.Config.Cmd) || !hasPath(cf.Config.Env) {
		t.Errorf("config = %s/%s %+v", cf.OS, cf.Architecture, cf.Config)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v", len(layers), err)
	}
}

// TestOCIRefs: names come from containerd's annotation, else from a full
// reference in ref.name; a bare tag names nothing.
func TestOCIRefs(t *testing.T) {
	index := []byte(`{"manifests":[
		{"annotations":{"io.containerd.image.name":"example.com/a:v1","org.opencontainers.image.ref.name":"v1"}},
		{"annotations":{"org.opencontainers.image.ref.name":"example.com/b:v2"}},
		{"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}`)
	refs, err := ociRefs(index)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/a:v1", "example.com/b:v2"}; !slices.Equal(refs, want) {
		t.Errorf("refs = %v, want %v", refs, want)
	}
}

func TestRefsRejectsUnnamed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.tar")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Refs(file); err == nil {
		t.Error("an empty file has no images; want an error")
	}
}
