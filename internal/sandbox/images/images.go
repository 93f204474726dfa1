// Package images maps image references to local root filesystems. There is
// no registry to pull from: the etcd releases of the toolchain are built in,
// a directory can be registered under any reference, and OCI or docker image
// tarballs are unpacked into a root filesystem.
package images

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultPath is the PATH of an image that sets none, as container runtimes
// do.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image is a root filesystem and the parts of its configuration a container
// uses.
type Image struct {
	Ref        string   `json:"ref"`
	Root       string   `json:"root"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	Source     string   `json:"source"`
}

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

// Registry is the set of known images, kept in memory and mirrored to a
// JSON file for `sandbox status`.
type Registry struct {
	mu     sync.RWMutex
	path   string
	images map[string]Image
	// changed is closed and replaced whenever an image is added, so Pods
	// waiting on a missing image retry at once.
	changed chan struct{}
}

// NewRegistry returns an empty registry saved to path.
func NewRegistry(path string) *Registry {
	return &Registry{path: path, images: map[string]Image{}, changed: make(chan struct{})}
}

// Add registers images under their references (normalising them).
func (r *Registry) Add(imgs ...Image) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, img := range imgs {
		ref, err := Normalize(img.Ref)
		if err != nil {
			return err
		}
		img.Ref = ref
		r.images[ref] = img
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return r.save()
}

// Lookup finds an image by reference.
func (r *Registry) Lookup(ref string) (Image, bool) {
	norm, err := Normalize(ref)
	if err != nil {
		return Image{}, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	img, ok := r.images[norm]
	return img, ok
}

// Changed returns a channel closed at the next Add.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// List returns every image sorted by reference.
func (r *Registry) List() []Image {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Image, 0, len(r.images))
	for _, img := range r.images {
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int {
		if a.Ref < b.Ref {
			return -1
		}
		if a.Ref > b.Ref {
			return 1
		}
		return 0
	})
	return out
}

func (r *Registry) save() error {
	if r.path == "" {
		return nil
	}
	list := make([]Image, 0, len(r.images))
	for _, img := range r.images {
		list = append(list, img)
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(r.path, data, 0o644)
}
