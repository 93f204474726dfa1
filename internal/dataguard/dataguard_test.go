package dataguard

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	withWAL := etcdDataDir(t)
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

// A restart in the same Pod without a log is refused once a start there
// saw one, even before the member ID reached the Pod. A start that found no
// log marks nothing: etcd may exit before it writes its first log (a join
// that cannot reach its peers yet), and its restarts must not be refused.
func TestGuardMarksASeenLog(t *testing.T) {
	state, data := t.TempDir(), t.TempDir()
	for i := range 3 {
		if err := Guard("", data, state); err != nil {
			t.Fatalf("start %d of a new member whose etcd never wrote its log: %v", i+1, err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, walSeenMark)); err == nil {
		t.Fatal("a start without a log marked the Pod")
	}
	writeWAL(t, data)
	if err := Guard("", data, state); err != nil {
		t.Fatalf("a restart in the same Pod with its log: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, walSeenMark)); err != nil {
		t.Fatalf("the log seen is not marked: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(data, "member")); err != nil {
		t.Fatal(err)
	}
	if err := Guard("", data, state); !errors.Is(err, ErrNoWAL) {
		t.Fatalf("a restart in the same Pod after its log was wiped: %v, want refused", err)
	}
	// A new Pod (a new state directory) of a member that never ran.
	if err := Guard("", t.TempDir(), t.TempDir()); err != nil {
		t.Fatalf("a new Pod: %v", err)
	}
	// Pods of older operators have no state directory.
	if err := Guard("", t.TempDir(), ""); err != nil {
		t.Fatalf("without a state directory: %v", err)
	}
	// The member ID alone still refuses an empty directory.
	if err := Guard("8e9e05c52164694d", t.TempDir(), t.TempDir()); !errors.Is(err, ErrNoWAL) {
		t.Fatalf("a member that ran, in a new Pod, directory wiped: %v, want refused", err)
	}
}

// writeWAL puts a data directory etcd wrote (its log and backend) into dir.
func writeWAL(t *testing.T, dir string) {
	t.Helper()
	if err := os.CopyFS(dir, os.DirFS(etcdDataDir(t))); err != nil {
		t.Fatal(err)
	}
}
