package dataguard

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	withWAL := t.TempDir()
	if err := os.MkdirAll(filepath.Join(withWAL, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withWAL, "member", "wal", "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	onlyTmp := t.TempDir()
	if err := os.MkdirAll(filepath.Join(onlyTmp, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A preallocated segment that was never renamed is not a log.
	if err := os.WriteFile(filepath.Join(onlyTmp, "member", "wal", "0.tmp"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, id, dir string
		refused       bool
	}{
		{"a member that never ran starts on an empty directory", "", t.TempDir(), false},
		{"a member that ran, with its log", "8e9e05c52164694d", withWAL, false},
		{"a member that ran, directory wiped", "8e9e05c52164694d", t.TempDir(), true},
		{"a member that ran, directory gone", "8e9e05c52164694d", filepath.Join(t.TempDir(), "missing"), true},
		{"a member that ran, no log file in the log directory", "8e9e05c52164694d", onlyTmp, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.id, c.dir)
			if got := errors.Is(err, ErrNoWAL); got != c.refused {
				t.Fatalf("Check(%q, %q) = %v; refused %t, want %t", c.id, c.dir, err, got, c.refused)
			}
		})
	}
	if err := Check("8e9e05c52164694d", ""); err == nil || errors.Is(err, ErrNoWAL) {
		t.Errorf("a member ID without a data directory: %v", err)
	}
}
