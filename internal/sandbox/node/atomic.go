package node

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// fileContent is one file of an API-data volume.
type fileContent struct {
	Data []byte
	Mode os.FileMode
}

const dataLink = "..data"

// writeAtomic makes dir hold exactly files, laid out like the kubelet's
// atomic writer: the files live in a timestamped directory, `..data` points
// to it, and each top-level name is a symlink through `..data`. An update
// writes a new directory and swaps the `..data` link in one rename, so a
// reader (etcd reloading its certificates) never sees half an update. gid,
// when not negative, owns every file (fsGroup). It reports whether anything
// changed.
func writeAtomic(dir string, files map[string]fileContent, gid int) (bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if unchanged(dir, files) {
		return false, nil
	}
	oldTarget, _ := os.Readlink(filepath.Join(dir, dataLink))
	ts, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		return false, err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return false, err
	}
	for name, f := range files {
		if err := writeDataFile(filepath.Join(ts, name), f, gid); err != nil {
			return false, err
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}
	if err := linkTopLevel(dir, files); err != nil {
		return false, err
	}
	if oldTarget != "" {
		_ = os.RemoveAll(filepath.Join(dir, oldTarget))
	}
	return true, nil
}

func writeDataFile(path string, f fileContent, gid int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := f.Mode
	if gid >= 0 {
		mode |= 0o440
	}
	if err := os.WriteFile(path, f.Data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	if gid >= 0 {
		return os.Chown(path, 0, gid)
	}
	return nil
}

// linkTopLevel points each top-level name through ..data and removes the
// links of names that disappeared.
func linkTopLevel(dir string, files map[string]fileContent) error {
	want := map[string]bool{}
	for name := range files {
		want[strings.SplitN(name, "/", 2)[0]] = true
	}
	for top := range want {
		link := filepath.Join(dir, top)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, top) {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(dataLink, top), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !want[e.Name()] {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// unchanged reports whether dir already holds exactly files.
func unchanged(dir string, files map[string]fileContent) bool {
	data := filepath.Join(dir, dataLink)
	count := 0
	err := filepath.WalkDir(data+"/", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		count++
		rel, _ := filepath.Rel(data, path)
		want, ok := files[rel]
		if !ok {
			return errors.New("extra file")
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want.Data) {
			return errors.New("changed")
		}
		return nil
	})
	return err == nil && count == len(files)
}
