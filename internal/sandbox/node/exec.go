package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
)

// executor runs `kubectl exec` commands inside containers.
type executor struct{ n *Node }

// ExecInContainer implements remotecommand.Executor; name is "ns/pod".
func (e *executor) ExecInContainer(ctx context.Context, name, _, ctrName string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	w, err := e.n.podByKey(name)
	if err != nil {
		return err
	}
	base, err := w.execBase(ctrName)
	if err != nil {
		return err
	}
	c, err := e.n.execCommand(ctx, base, cmd)
	if err != nil {
		return err
	}
	if tty {
		err = runWithTTY(c, in, out, resize)
	} else {
		err = runPiped(c, in, out, errw)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return utilexec.CodeExitError{Err: err, Code: int(exitCode(exitErr.ProcessState))}
	}
	return err
}

// PortForward implements portforward.PortForwarder by dialling the Pod IP
// from the host.
func (e *executor) PortForward(ctx context.Context, name, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	w, err := e.n.podByKey(name)
	if err != nil {
		return err
	}
	conn, err := dialPod(w, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// execBase is what a command in the container inherits: its process,
// environment, user and working directory.
func (w *podWorker) execBase(name string) (container.ExecSpec, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.findCtr(name)
	if c == nil {
		return container.ExecSpec{}, fmt.Errorf("container %s is not valid for pod %s", name, w.name)
	}
	if c.proc == nil {
		return container.ExecSpec{}, fmt.Errorf("container %s in pod %s is not running", name, w.name)
	}
	return c.proc.execBase, nil
}

// execCommand prepares `sandbox exec-init` for cmd.
func (n *Node) execCommand(ctx context.Context, base container.ExecSpec, cmd []string) (*exec.Cmd, error) {
	spec := base
	spec.Args = cmd
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(ctx, n.cfg.Binary, "exec-init", string(data))
	c.Env = []string{}
	c.WaitDelay = time.Second
	return c, nil
}

// runExec runs a probe command and returns its exit code and output.
func (n *Node) runExec(ctx context.Context, base container.ExecSpec, cmd []string) (int32, string, error) {
	c, err := n.execCommand(ctx, base, cmd)
	if err != nil {
		return 0, "", err
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitCode(exitErr.ProcessState), out.String(), nil
	}
	if err != nil {
		return 0, "", err
	}
	return 0, out.String(), nil
}

func runPiped(c *exec.Cmd, in io.Reader, out, errw io.Writer) error {
	if in != nil {
		c.Stdin = in
	}
	if out != nil {
		c.Stdout = out
	}
	if errw != nil {
		c.Stderr = errw
	}
	err := c.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

// runWithTTY gives the command a pseudo-terminal as its controlling
// terminal and forwards window size changes.
func runWithTTY(c *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	master, slave, err := openPTY()
	if err != nil {
		return err
	}
	defer master.Close()
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		slave.Close()
		return err
	}
	slave.Close()
	var wg sync.WaitGroup
	if resize != nil {
		go func() {
			for size := range resize {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if out != nil {
			_, _ = io.Copy(out, master) // ends with EIO once the command exits
		}
	}()
	err = c.Wait()
	waitTimeout(&wg, time.Second)
	return err
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// openPTY allocates a pseudo-terminal pair on the host's devpts.
func openPTY() (*os.File, *os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking pty: %w", err)
	}
	num, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(num), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}
