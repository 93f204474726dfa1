package dataguard

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// sh runs a shell script as the guard's child, with the data directory in
// $D.
func sh(dataDir, script string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "D="+dataDir)
	return cmd
}

// A log etcd writes during its first run is marked, so that a restart in
// the same Pod after a wipe is refused before the member ID reached the Pod;
// etcd's exit code is the container's.
func TestSuperviseMarksTheLogWrittenDuringTheRun(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	code, err := Supervise(sh(data, `mkdir -p "$D/member/wal" && : > "$D/member/wal/0000000000000000-0000000000000000.wal" && sleep 0.5 && exit 3`), nil, data, state)
	if err != nil || code != 3 {
		t.Fatalf("Supervise = %d, %v; want etcd's exit code 3", code, err)
	}
	if _, err := os.Stat(filepath.Join(state, walSeenMark)); err != nil {
		t.Fatalf("the log written during the run is not marked: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(data, "member")); err != nil {
		t.Fatal(err)
	}
	if err := Guard("", data, state); !errors.Is(err, ErrNoWAL) {
		t.Fatalf("a restart after the wipe: %v, want refused", err)
	}
}

// A first run that exits before etcd wrote its log marks nothing: the
// restart is a first start again.
func TestSuperviseFirstRunWithoutLog(t *testing.T) {
	data, state := t.TempDir(), t.TempDir()
	code, err := Supervise(sh(data, `sleep 0.5; echo "cannot fetch cluster info from peer urls" >&2; exit 1`), nil, data, state)
	if err != nil || code != 1 {
		t.Fatalf("Supervise = %d, %v; want 1", code, err)
	}
	if err := Guard("", data, state); err != nil {
		t.Fatalf("the restart of a member whose etcd never wrote its log: %v", err)
	}
}

// Signals reach etcd, and a death by signal ends the container as a shell
// reports it.
func TestSuperviseSignals(t *testing.T) {
	data := t.TempDir()
	signals := make(chan os.Signal, 1)
	ready := filepath.Join(data, "trapped")
	go func() {
		for {
			if _, err := os.Stat(ready); err == nil {
				signals <- syscall.SIGTERM
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	code, err := Supervise(sh(data, `trap 'exit 7' TERM; : > "$D/trapped"; while :; do sleep 0.1; done`), signals, data, "")
	if err != nil || code != 7 {
		t.Fatalf("Supervise = %d, %v; want 7 from etcd's own handling of SIGTERM", code, err)
	}
	code, err = Supervise(sh(data, `kill -KILL $$`), nil, data, "")
	if err != nil || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("Supervise = %d, %v; want %d", code, err, 128+int(syscall.SIGKILL))
	}
	if _, err := Supervise(exec.Command(filepath.Join(data, "missing")), nil, data, ""); err == nil {
		t.Fatal("a command that cannot start: no error")
	}
}
