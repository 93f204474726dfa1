package dataguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// walPoll is how often the guard looks for the log etcd writes on its
// first start.
const walPoll = 200 * time.Millisecond

// selfStopHold is how long the guard keeps the container after etcd
// stopped by itself. etcd exits with 0 without a signal only once its
// server stopped for good, which it does when the member is removed from
// the cluster: the operator removes a member and then deletes its Pod, and
// a kubelet that saw the container end before it saw the deletion started
// etcd again (seen on the sandbox in scale-downs), which then had to be
// stopped too. Holding, the container ends with the signal the deletion
// brings; after the hold it ends as before.
var selfStopHold = 10 * time.Second

// holding, when set (by tests), is called as the hold begins.
var holding func()

// Supervise runs etcd (cmd, started here) as the guard's child until it
// exits, and returns the exit code the container should end with: etcd's
// own, or 128 plus the signal that ended it. Each signal received on
// signals is passed on to etcd. While etcd runs, the guard watches
// dataDir for the write-ahead log and marks it in stateDir once it is
// there, so that a restart of the container in this Pod after a wipe is
// refused even when etcd wrote its log only during this run.
func Supervise(cmd *exec.Cmd, signals <-chan os.Signal, dataDir, stateDir string) (int, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(walPoll)
	defer tick.Stop()
	watch := tick.C
	if stateDir == "" || dataDir == "" {
		watch = nil
	}
	signalled := false
	for {
		select {
		case s := <-signals:
			// Gone already when it exited meanwhile; Wait reports that.
			_ = cmd.Process.Signal(s)
			signalled = true
		case <-watch:
			if marked, err := markIfLogged(dataDir, stateDir); marked || err != nil {
				if err != nil {
					fmt.Fprintln(os.Stderr, "guard-data:", err)
				}
				watch = nil
			}
		case err := <-exited:
			// The last look: etcd may have written its log and exited
			// between two ticks.
			if watch != nil {
				_, _ = markIfLogged(dataDir, stateDir)
			}
			return ended(err, signalled, signals)
		}
	}
}

// markIfLogged marks the log in stateDir if dataDir holds one.
func markIfLogged(dataDir, stateDir string) (bool, error) {
	found, err := hasWAL(dataDir)
	if err != nil || !found {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(stateDir, walSeenMark), nil, 0o600); err != nil {
		return false, fmt.Errorf("marking the log seen in %s: %w", stateDir, err)
	}
	return true, nil
}

// exitCode is the code a shell would report for the ended child.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 0, err
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return exit.ExitCode(), nil
}

// ended is the container's exit code once etcd ended (err from Wait),
// after the hold when etcd stopped by itself.
func ended(err error, signalled bool, signals <-chan os.Signal) (int, error) {
	code, err := exitCode(err)
	if err == nil && code == 0 && !signalled {
		holdAfterSelfStop(signals)
	}
	return code, err
}

// holdAfterSelfStop waits for a signal, or selfStopHold.
func holdAfterSelfStop(signals <-chan os.Signal) {
	fmt.Fprintf(os.Stderr, "guard-data: etcd stopped by itself (as it does once this member is removed from the cluster); the container ends on the Pod's deletion or in %s\n", selfStopHold)
	if holding != nil {
		holding()
	}
	t := time.NewTimer(selfStopHold)
	defer t.Stop()
	select {
	case <-signals:
	case <-t.C:
	}
}
