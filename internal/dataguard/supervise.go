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
	for {
		select {
		case s := <-signals:
			// Gone already when it exited meanwhile; Wait reports that.
			_ = cmd.Process.Signal(s)
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
			return exitCode(err)
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
