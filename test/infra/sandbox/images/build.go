package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Spec describes an image of one layer.
type Spec struct {
	// Refs are the references the image is tagged with.
	Refs []string
	// Root, when set, is a directory whose whole tree goes into the layer.
	Root string
	// Files are host files put into the layer at the given paths (0755).
	Files map[string]string
	// Dirs are directories with their modes; Text small files (0644).
	Dirs map[string]os.FileMode
	Text map[string]string
	// Owners sets the owner (uid, gid) of paths in the layer (default root).
	Owners map[string][2]int
	// Config is the image's configuration (entrypoint, cmd, env, user).
	Config v1.Config
}

// epoch is every file's time in the layer, so the same inputs make the same
// image.
var epoch = time.Unix(0, 0)

// Write packs the image into a docker-save tarball at file. The layer is
// gzip without compression: the images are imported on this machine only,
// and deflating tens of megabytes of binaries would cost seconds for
// nothing.
func Write(spec Spec, file string) error {
	var buf bytes.Buffer
	if err := writeLayer(&buf, spec); err != nil {
		return err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	// The platform of this machine: containerd unpacks only a matching image.
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = spec.Config
	if !hasPath(cf.Config.Env) {
		cf.Config.Env = append([]string{DefaultPath}, cf.Config.Env...)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tags := map[name.Reference]v1.Image{}
	for _, ref := range spec.Refs {
		tag, err := name.NewTag(ref, name.WeakValidation)
		if err != nil {
			return fmt.Errorf("bad image reference %q: %w", ref, err)
		}
		tags[tag] = img
	}
	return writeAtomically(file, func(tmp string) error { return tarball.MultiRefWriteToFile(tmp, tags) })
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func writeLayer(w io.Writer, spec Spec) error {
	tw := tar.NewWriter(w)
	for _, d := range sortedKeys(spec.Dirs) {
		mode := int64(spec.Dirs[d].Perm())
		if spec.Dirs[d]&os.ModeSticky != 0 {
			mode |= 0o1000
		}
		owner := spec.Owners[d]
		hdr := &tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: owner[0], Gid: owner[1], ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(spec.Text) {
		if err := writeFile(tw, p, 0o644, []byte(spec.Text[p])); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(spec.Files) {
		data, err := os.ReadFile(spec.Files[p])
		if err != nil {
			return err
		}
		if err := writeFile(tw, p, 0o755, data); err != nil {
			return err
		}
	}
	if spec.Root != "" {
		if err := writeTree(tw, spec.Root); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, p string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// writeTree adds a directory's tree with its modes and owners; symlinks stay
// links.
func writeTree(tw *tar.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}
