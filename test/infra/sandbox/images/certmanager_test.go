package images

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestCertManagerImage: the image is tagged with the toolchain directory the
// bin/ link points into and runs the binary as nonroot.
func TestCertManagerImage(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cert-manager", "v1.21.2-0123456789ab")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert-manager-controller"), []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "cert-manager-controller"), filepath.Join(root, "bin", "cert-manager-controller")); err != nil {
		t.Fatal(err)
	}

	img, err := CertManagerImage(root)
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/seed74754924/etcd-operator/cert-manager-controller:v1.21.2-0123456789ab"
	if !slices.Equal(img.Refs, []string{want}) || img.System {
		t.Fatalf("tarball = %+v, want refs [%s], not a system image", img, want)
	}
	tag, _ := name.NewTag(want)
	image, err := tarball.ImageFromPath(img.File, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/cert-manager-controller"}) || cf.Config.User != "65532:65532" {
		t.Errorf("config = %+v", cf.Config)
	}
}

// TestCertManagerImageMissing: without the tool the error says how to build it.
func TestCertManagerImageMissing(t *testing.T) {
	if _, err := CertManagerImage(t.TempDir()); err == nil {
		t.Fatal("no error without bin/cert-manager-controller")
	}
}
