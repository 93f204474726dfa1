package node

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		return string(b)
	}
	steps := []struct {
		files       map[string]fileContent
		wantChanged bool
		want        map[string]string
		gone        []string
	}{
		{files: map[string]fileContent{"a": {Data: []byte("1"), Mode: 0o644}, "d/b": {Data: []byte("2"), Mode: 0o600}}, wantChanged: true,
			want: map[string]string{"a": "1", "d/b": "2"}},
		{files: map[string]fileContent{"a": {Data: []byte("1"), Mode: 0o644}, "d/b": {Data: []byte("2"), Mode: 0o600}}, wantChanged: false,
			want: map[string]string{"a": "1", "d/b": "2"}},
		{files: map[string]fileContent{"a": {Data: []byte("3"), Mode: 0o644}}, wantChanged: true,
			want: map[string]string{"a": "3"}, gone: []string{"d"}},
	}
	for i, s := range steps {
		changed, err := writeAtomic(dir, s.files, -1)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if changed != s.wantChanged {
			t.Errorf("step %d: changed=%v, want %v", i, changed, s.wantChanged)
		}
		for name, content := range s.want {
			if got := read(name); got != content {
				t.Errorf("step %d: %s = %q, want %q", i, name, got, content)
			}
		}
		for _, name := range s.gone {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				t.Errorf("step %d: %s should be gone", i, name)
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // ..data, the timestamped directory, a
		t.Errorf("left behind: %d entries, want 3", len(entries))
	}
}
