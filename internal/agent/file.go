package agent

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// copyBuffer is the buffer of every file copy: big enough for throughput,
// small enough that memory stays flat.
const copyBuffer = 1 << 20

// fileStore keeps snapshots in a directory of a mounted volume.
type fileStore struct {
	dir string
}

// newFileStore roots a store at mount/sub; sub may not climb out of mount.
func newFileStore(mount, sub string) (*fileStore, error) {
	if mount == "" {
		return nil, permanent(conditions.ReasonAgentMisconfigured, "PVC_MOUNT_PATH is not set")
	}
	clean, err := cleanRelative(sub, "PVC subPath")
	if err != nil {
		return nil, err
	}
	return &fileStore{dir: filepath.Join(mount, clean)}, nil
}

func (s *fileStore) URI(name string) string { return "file://" + filepath.Join(s.dir, name) }

// Check makes the directory if it is missing.
func (s *fileStore) Check(context.Context) error {
	if err := os.MkdirAll(s.dir, 0o775); err != nil {
		return fileError(err, "creating directory "+s.dir)
	}
	return nil
}

func (s *fileStore) Stat(_ context.Context, name string) (*fileInfo, error) {
	info, err := os.Stat(filepath.Join(s.dir, name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fileError(err, "reading "+s.URI(name))
	case !info.Mode().IsRegular():
		return nil, permanent(conditions.ReasonInvalidDestination, "%s is not a regular file", s.URI(name))
	}
	return &fileInfo{Size: info.Size()}, nil
}

// Write copies r into a hidden temporary file of the same directory, syncs
// it and renames it into place.
func (s *fileStore) Write(_ context.Context, name string, r io.Reader, _ int64, _ fileMeta) (err error) {
	tmp, err := os.CreateTemp(s.dir, "."+name+".tmp-*")
	if err != nil {
		return fileError(err, "creating a file in "+s.dir)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = io.CopyBuffer(onlyWriter{tmp}, r, make([]byte, copyBuffer)); err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return ae
		}
		return fileError(err, "writing "+s.URI(name))
	}
	if err = tmp.Sync(); err != nil {
		return fileError(err, "syncing "+s.URI(name))
	}
	if err = tmp.Close(); err != nil {
		return fileError(err, "closing "+s.URI(name))
	}
	if err = os.Rename(tmp.Name(), filepath.Join(s.dir, name)); err != nil {
		return fileError(err, "renaming into "+s.URI(name))
	}
	return syncDir(s.dir)
}

// onlyWriter hides ReadFrom, so that CopyBuffer uses the given buffer.
type onlyWriter struct{ io.Writer }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fileError(err, "opening "+dir)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fileError(err, "syncing "+dir)
	}
	return nil
}

func (s *fileStore) Read(_ context.Context, name string) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(s.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, permanent(conditions.ReasonSnapshotNotFound, "%s does not exist", s.URI(name))
	}
	if err != nil {
		return nil, fileError(err, "opening "+s.URI(name))
	}
	return f, nil
}

func (s *fileStore) Remove(_ context.Context, name string) error {
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fileError(err, "deleting "+s.URI(name))
	}
	return nil
}

func (s *fileStore) List(context.Context) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fileError(err, "listing "+s.dir)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// fileError gives a file system error the reason it is reported under.
func fileError(err error, doing string) *Error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return permanent(conditions.ReasonStorageFull, "%s: no space left on the volume: %v", doing, err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return permanent(conditions.ReasonInvalidDestination, "%s: %v (the agent runs as user 65532; the volume must be writable by it or by its fsGroup)", doing, err)
	}
	return transient(conditions.ReasonStorageError, "%s: %v", doing, err)
}
