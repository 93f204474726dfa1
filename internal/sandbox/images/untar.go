package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Untar extracts a tar stream into dir. Every path is resolved inside dir
// (os.Root refuses to leave it, symlinks included), so a hostile image
// cannot write outside its root filesystem. Device nodes are skipped: a
// container gets its own minimal /dev.
func Untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if err := extractEntry(root, tr, hdr, name); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

func extractEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	mode := os.FileMode(hdr.Mode) & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o755); err != nil {
			return err
		}
	case tar.TypeReg:
		_ = root.Remove(name)
		f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	case tar.TypeSymlink:
		_ = root.Remove(name)
		return lchownQuiet(root, name, hdr, root.Symlink(hdr.Linkname, name))
	case tar.TypeLink:
		_ = root.Remove(name)
		return root.Link(strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/"), name)
	default:
		return nil
	}
	if err := root.Chmod(name, fileModeBits(mode, hdr)); err != nil {
		return err
	}
	return lchownQuiet(root, name, hdr, nil)
}

// fileModeBits converts tar permission bits to the os package's flags.
func fileModeBits(mode os.FileMode, hdr *tar.Header) os.FileMode {
	out := mode & os.ModePerm
	if hdr.Mode&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

func lchownQuiet(root *os.Root, name string, hdr *tar.Header, prev error) error {
	if prev != nil {
		return prev
	}
	return root.Lchown(name, hdr.Uid, hdr.Gid)
}
