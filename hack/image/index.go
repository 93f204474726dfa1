package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// refAnnotation names an image of an OCI layout (its tag, or the full
// reference under containerd's own annotation).
const (
	refAnnotation           = "org.opencontainers.image.ref.name"
	containerdRefAnnotation = "io.containerd.image.name"
)

// buildIndex packs one image per platform ("os/arch=binary") into an image
// index and writes it as an OCI layout tarball naming it ref.
func buildIndex(ps []string, ref, out string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("bad reference %q: %w", ref, err)
	}
	var idx v1.ImageIndex = empty.Index
	for _, p := range ps {
		platform, binaries, ok := strings.Cut(p, "=")
		goos, arch, ok2 := strings.Cut(platform, "/")
		binary, tools, _ := strings.Cut(binaries, ",")
		if !ok || !ok2 || binary == "" {
			return fmt.Errorf("--platform %q: want os/arch=binary[,tools]", p)
		}
		img, err := image(binary, tools, goos, arch)
		if err != nil {
			return fmt.Errorf("%s: %w", platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}}})
	}
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		refAnnotation: tag.TagStr(), containerdRefAnnotation: tag.Name(),
	})); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// tarDir writes the files under dir into a tarball at out, in a stable
// order with fixed times and owners, so the same images give the same
// bytes.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	epoch := time.Unix(0, 0)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir})
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: info.Size()}); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// untar unpacks a tarball of regular files and directories into dir.
func untar(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(h.Name)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%s: entry %q is outside the layout", file, h.Name)
		}
		p := filepath.Join(dir, clean)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
}
