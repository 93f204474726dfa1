package dataguard

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
	// The script says on stdout when its trap is set; the signal goes then.
	// It gives up by itself after 30 s, so a signal lost fails the test.
	ready, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ready.Close() }()
	cmd := sh(data, `trap 'exit 7' TERM; echo trapped; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 9`)
	cmd.Stdout = w
	go func() {
		if line, _ := bufio.NewReader(ready).ReadString('\n'); line == "trapped\n" {
			signals <- syscall.SIGTERM
		}
	}()
	code, err := Supervise(cmd, signals, data, "")
	_ = w.Close()
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

// etcd ending by itself with 0 (its server stopped for good: the member was
// removed) keeps the container until a signal comes, so that the kubelet
// cannot start etcd again before it sees the Pod's deletion; a hold without
// a signal ends after selfStopHold. Any other end is passed on at once.
func TestSuperviseHoldsAfterASelfStop(t *testing.T) {
	data := t.TempDir()
	defer func(d time.Duration) { selfStopHold = d }(selfStopHold)
	selfStopHold = time.Hour

	signals := make(chan os.Signal, 1)
	held := make(chan struct{})
	var once sync.Once
	holding = func() { once.Do(func() { close(held) }) }
	defer func() { holding = nil }()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Supervise(sh(data, `exit 0`), signals, data, "")
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the container ended (%d, %v) without waiting for a signal", r.code, r.err)
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("etcd's exit with 0 never began a hold")
	}
	select {
	case r := <-done:
		t.Fatalf("the container ended (%d, %v) during the hold, before any signal", r.code, r.err)
	default:
	}
	signals <- syscall.SIGTERM
	select {
	case r := <-done:
		if r.err != nil || r.code != 0 {
			t.Fatalf("Supervise = %d, %v; want 0", r.code, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the signal did not end the hold")
	}

	for _, script := range []string{`exit 1`, `kill -KILL $$`} {
		done := make(chan int, 1)
		go func() {
			code, _ := Supervise(sh(data, script), make(chan os.Signal), data, "")
			done <- code
		}()
		select {
		case code := <-done:
			if code == 0 {
				t.Errorf("%s: exit code 0", script)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: held, want passed on at once", script)
		}
	}

	selfStopHold = 50 * time.Millisecond
	if code, err := Supervise(sh(data, `exit 0`), make(chan os.Signal), data, ""); err != nil || code != 0 {
		t.Fatalf("a hold without a signal: %d, %v; want 0 after the hold", code, err)
	}
}
