// Package proc supervises the sandbox's long-running child processes (the
// control plane, every node's containerd and kubelet, kube-proxy): each is
// restarted when it exits on its own, stopped with SIGTERM then SIGKILL,
// and logs to a file.
package proc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process supervises one binary: it restarts it when it exits on its own
// (etcd or kube-apiserver crashing would otherwise leave a dead sandbox) and
// stops it with SIGTERM, then SIGKILL.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	done     chan struct{}
}

// start launches the supervision loop and returns once the first start
// succeeded.
func (p *Process) Start() error {
	if err := p.launch(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go p.supervise()
	return nil
}

func (p *Process) launch() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Pdeathsig: if the daemon dies, its control plane goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

func (p *Process) supervise() {
	defer close(p.done)
	backoff := time.Second
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		err := cmd.Wait()
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if stopping {
			return
		}
		slog.Warn("Process exited; restarting it", "process", p.Name, "err", err, "after", backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, 30*time.Second)
		if err := p.launch(); err != nil {
			slog.Error("Cannot restart process; giving up on it", "process", p.Name, "err", err)
			return
		}
	}
}

// Stop ends the process, waiting up to grace before killing it.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || p.done == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-p.done
	}
}

// WaitFor polls check until it succeeds, the process dies for good, or ctx
// ends; the error names the process and its log.
func (p *Process) WaitFor(ctx context.Context, what string, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become %s (see %s): %w", p.Name, what, p.LogPath, last)
		case <-p.done:
			return fmt.Errorf("%s exited; see %s", p.Name, p.LogPath)
		case <-tick.C:
		}
	}
}
