// Package images makes the OCI images the sandbox's nodes run. There is no
// registry to pull from: the etcd releases of the toolchain, the pause
// process and CoreDNS are packed into image tarballs (with
// go-containerregistry, cached next to the toolchain), a directory can be
// packed under any reference, and every tarball, these or a user's, is
// imported as it is into each node's containerd.
package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultPath is the PATH of an image that sets none, as container runtimes
// use.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Annotations under which OCI layouts name their images.
const (
	annotationContainerd = "io.containerd.image.name"
	annotationRefName    = "org.opencontainers.image.ref.name"
)

// Normalize turns a reference into its canonical form, so `busybox`,
// `busybox:latest` and `docker.io/library/busybox:latest` are one image; a
// reference without tag or digest means :latest.
func Normalize(ref string) (string, error) {
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return r.Name(), nil
}

// Refs lists the references a docker-save or OCI-layout tarball names its
// images by, normalised. A tarball whose images have no name cannot be
// imported usefully, so that is an error.
func Refs(file string) ([]string, error) {
	index, docker, err := readIndex(file)
	if err != nil {
		return nil, err
	}
	var refs []string
	if docker {
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
		if err != nil {
			return nil, fmt.Errorf("reading the manifest of %s: %w", file, err)
		}
		for _, desc := range m {
			refs = append(refs, desc.RepoTags...)
		}
	} else {
		if refs, err = ociRefs(index); err != nil {
			return nil, fmt.Errorf("reading index.json of %s: %w", file, err)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("no image in %s has a name: tag it before saving", file)
	}
	for i, r := range refs {
		if refs[i], err = Normalize(r); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// ociRefs reads the images' names from an OCI index; a bare tag in
// ref.name names nothing on its own.
func ociRefs(index []byte) ([]string, error) {
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return nil, err
	}
	var refs []string
	for _, m := range idx.Manifests {
		if ref := m.Annotations[annotationContainerd]; ref != "" {
			refs = append(refs, ref)
		} else if ref := m.Annotations[annotationRefName]; strings.ContainsAny(ref, "/:") {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// readIndex finds index.json (an OCI layout, returned) or manifest.json (a
// docker-save tarball, reported by the flag) in a tarball.
func readIndex(file string) ([]byte, bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("%s is neither a docker image tarball (manifest.json) nor an OCI layout (index.json)", file)
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading %s: %w", file, err)
		}
		switch path.Clean(hdr.Name) {
		case "manifest.json":
			return nil, true, nil
		case "index.json":
			data, err := io.ReadAll(tr)
			return data, false, err
		}
	}
}

// writeAtomically writes a file through a temporary one renamed into place,
// so a concurrent reader (another sandbox using the same cache) never sees
// half of it.
func writeAtomically(file string, write func(tmp string) error) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".tmp-"+filepath.Base(file)+"-")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := write(tmp.Name()); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

func exists(file string) bool {
	_, err := os.Stat(file)
	return !errors.Is(err, fs.ErrNotExist)
}
