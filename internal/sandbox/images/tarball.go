package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Annotations under which OCI layouts name their images.
const (
	annotationContainerd = "io.containerd.image.name"
	annotationRefName    = "org.opencontainers.image.ref.name"
)

// Load unpacks every image in a docker-save or OCI-layout tarball into a
// root filesystem under dir and returns them, one per reference.
func Load(file, dir string) ([]Image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	kind, err := tarballKind(file)
	if err != nil {
		return nil, err
	}
	if kind == "oci" {
		return loadOCI(file, dir)
	}
	return loadDocker(file, dir)
}

// tarballKind tells a docker-save tarball (manifest.json) from an OCI
// layout (index.json).
func tarballKind(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s is neither a docker image tarball (manifest.json) nor an OCI layout (index.json)", file)
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", file, err)
		}
		switch path.Clean(hdr.Name) {
		case "manifest.json":
			return "docker", nil
		case "index.json":
			return "oci", nil
		}
	}
}

func loadDocker(file, dir string) ([]Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", file, err)
	}
	var out []Image
	for _, desc := range manifest {
		if len(desc.RepoTags) == 0 {
			return nil, fmt.Errorf("an image in %s has no tag: tag it before saving, or unpack it and use `sandbox image add`", file)
		}
		tag, err := name.NewTag(desc.RepoTags[0], name.WeakValidation)
		if err != nil {
			return nil, err
		}
		img, err := tarball.Image(opener, &tag)
		if err != nil {
			return nil, err
		}
		loaded, err := unpack(img, dir, desc.RepoTags)
		if err != nil {
			return nil, err
		}
		out = append(out, loaded...)
	}
	return out, nil
}

func loadOCI(file, dir string) ([]Image, error) {
	tmp, err := os.MkdirTemp(dir, ".layout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := extractPlain(file, tmp); err != nil {
		return nil, err
	}
	index, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return nil, err
	}
	im, err := index.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, desc := range im.Manifests {
		refs := ociRefs(desc.Annotations)
		if len(refs) == 0 {
			return nil, fmt.Errorf("image %s in %s has no name (annotation %s)", desc.Digest, file, annotationRefName)
		}
		img, err := index.Image(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %s in %s: %w", desc.Digest, file, err)
		}
		loaded, err := unpack(img, dir, refs)
		if err != nil {
			return nil, err
		}
		out = append(out, loaded...)
	}
	return out, nil
}

// ociRefs reads an image's references from its index annotations; a bare
// tag in ref.name names nothing on its own.
func ociRefs(annotations map[string]string) []string {
	if ref := annotations[annotationContainerd]; ref != "" {
		return []string{ref}
	}
	if ref := annotations[annotationRefName]; strings.ContainsAny(ref, "/:") {
		return []string{ref}
	}
	return nil
}

// unpack flattens the image's layers into dir/<digest>/rootfs and returns
// one Image per reference.
func unpack(img v1.Image, dir string, refs []string) ([]Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, digest.Hex[:16], "rootfs")
	if _, err := os.Stat(root); err != nil {
		if err := flatten(img, root); err != nil {
			return nil, err
		}
	}
	var out []Image
	for _, ref := range refs {
		out = append(out, FromConfig(ref, root, cfg.Config))
	}
	return out, nil
}

// FromConfig keeps the parts of an image configuration a container uses.
func FromConfig(ref, root string, c v1.Config) Image {
	env := c.Env
	if !hasPath(env) {
		env = append([]string{DefaultPath}, env...)
	}
	return Image{
		Ref: ref, Root: root, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: env,
		WorkingDir: c.WorkingDir, User: c.User, Source: "tarball",
	}
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}

func flatten(img v1.Image, root string) error {
	tmp := root + ".partial"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := Untar(rc, tmp); err != nil {
		return fmt.Errorf("unpacking layers: %w", err)
	}
	return os.Rename(tmp, root)
}

// extractPlain unpacks a tarball file (an OCI layout) into dir.
func extractPlain(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return Untar(f, dir)
}
