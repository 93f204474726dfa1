package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
	"github.com/seed74754924/etcd-operator/internal/sandbox/images"
)

// runContainers runs the init containers one after another, then starts
// (or restarts, by policy and back-off) every container.
func (w *podWorker) runContainers(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	policy := pod.Spec.RestartPolicy
	for _, c := range w.init {
		if c.succeeded() {
			continue
		}
		if c.proc != nil {
			return
		}
		if c.exit != nil && !shouldRestart(policy, true, c.exit.ExitCode) {
			return
		}
		w.maybeStartLocked(pod, c, now)
		return
	}
	for _, c := range w.ctrs {
		if c.proc != nil {
			continue
		}
		if c.exit != nil && !shouldRestart(policy, false, c.exit.ExitCode) {
			continue
		}
		w.maybeStartLocked(pod, c, now)
	}
}

// maybeStartLocked starts c unless its back-off has not expired.
func (w *podWorker) maybeStartLocked(pod *corev1.Pod, c *ctr, now time.Time) {
	pulling := c.exit == nil && c.state.Waiting != nil &&
		(c.state.Waiting.Reason == "ErrImagePull" || c.state.Waiting.Reason == "ImagePullBackOff")
	if _, ok := w.n.cfg.Images.Lookup(c.spec.Image); ok && pulling {
		c.nextStart = time.Time{} // the image was just added: no reason to wait
	}
	if now.Before(c.nextStart) {
		switch {
		case c.exit != nil:
			c.lastTerm = c.exit
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CrashLoopBackOff", Message: backoffMessage(c.nextStart.Sub(c.exit.FinishedAt.Time), c, pod),
			}}
		case pulling:
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ImagePullBackOff", Message: fmt.Sprintf("Back-off pulling image %q", c.spec.Image),
			}}
		}
		return
	}
	if err := w.startLocked(pod, c); err != nil {
		reason := "CreateContainerConfigError"
		if errors.As(err, new(*pullError)) {
			reason = "ErrImagePull"
		}
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}}
		w.n.recorder.Event(pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %s: %v", reason, err))
	}
}

// pullError is an image that is not in the registry.
type pullError struct{ image string }

func (e *pullError) Error() string {
	return fmt.Sprintf("failed to pull image %q: the image is not known to the sandbox; register it with `sandbox image add REF DIR` or `sandbox image load FILE`", e.image)
}

// lookupImage finds the image; while it is missing the container retries
// with a back-off of 10 s doubling (adding the image retries at once).
func (w *podWorker) lookupImage(c *ctr) (images.Image, error) {
	img, ok := w.n.cfg.Images.Lookup(c.spec.Image)
	if ok {
		c.pullDelay = 0
		return img, nil
	}
	c.pullDelay = min(max(2*c.pullDelay, 10*time.Second), w.n.cfg.MaxBackoff)
	c.nextStart = time.Now().Add(c.pullDelay)
	return images.Image{}, &pullError{image: c.spec.Image}
}

// startLocked builds the container's spec and starts container-init.
func (w *podWorker) startLocked(pod *corev1.Pod, c *ctr) error {
	img, err := w.lookupImage(c)
	if err != nil {
		return err
	}
	facts := w.facts()
	env, err := resolveEnv(pod, &c.spec, img.Env, facts, w.n)
	if err != nil {
		return err
	}
	id, err := containerIdentity(pod, &c.spec, img)
	if err != nil {
		return err
	}
	instance := c.restartCount
	if c.everStarted {
		instance++
	}
	dir := w.containerDir(c.spec.Name)
	files, err := w.instanceFiles(dir, instance)
	if err != nil {
		return err
	}
	mounts, err := mountPlan(&c.spec, w.volInfo, w.etcFiles(), files.termLog, env)
	if err != nil {
		return err
	}
	if err := prepareSources(mounts); err != nil {
		return err
	}
	workDir := c.spec.WorkingDir
	if workDir == "" {
		workDir = img.WorkingDir
	}
	spec := &container.Spec{
		NetnsPath: netnsPath(w.net.Netns), Hostname: podHostname(pod), Rootfs: img.Root, Scratch: files.scratch,
		ReadOnlyRootfs: readOnlyRoot(&c.spec), Mounts: mounts, Args: containerArgs(&c.spec, img, env), Env: env,
		WorkingDir: workDir, UID: id.UID, GID: id.GID, Groups: id.Groups, ErrorFile: files.errorFile,
	}
	if err := container.WriteSpec(files.spec, spec); err != nil {
		return err
	}
	logs, err := newLogWriter(filepath.Join(w.logDir, c.spec.Name), instance)
	if err != nil {
		return err
	}
	p, err := w.spawn(files.spec, logs)
	if err != nil {
		logs.close()
		return err
	}
	p.instance, p.termLog, p.errorFile = instance, files.termLog, files.errorFile
	p.execBase = container.ExecSpec{PID: p.pid, Env: env, WorkingDir: workDir, UID: id.UID, GID: id.GID, Groups: id.Groups}
	w.markStartedLocked(pod, c, p, img)
	return nil
}

func (w *podWorker) markStartedLocked(pod *corev1.Pod, c *ctr, p *proc, img images.Image) {
	if c.everStarted {
		c.restartCount++
	}
	if c.exit != nil {
		c.lastTerm = c.exit
	}
	c.everStarted = true
	c.proc = p
	c.exit = nil
	c.imageID = "sandbox://" + img.Ref
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.startedAt)}}
	c.started = c.spec.StartupProbe == nil
	c.ready = c.started && c.spec.ReadinessProbe == nil
	w.n.recorder.Eventf(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	go w.waitExit(c, p)
	w.startProbes(pod, c, p)
}

// spawn starts container-init in new mount and UTS namespaces with its
// output going to the log writer.
func (w *podWorker) spawn(specPath string, logs *logWriter) (*proc, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(w.n.cfg.Binary, "container-init", specPath)
	cmd.Env = []string{}
	// *os.File outputs: Wait returns when the process exits, not when every
	// descendant has closed its copy of the pipe.
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS, Setsid: true}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("starting container-init: %w", err)
	}
	logs.follow(outR, "stdout")
	logs.follow(errR, "stderr")
	return &proc{cmd: cmd, pid: cmd.Process.Pid, startedAt: time.Now(), exited: make(chan struct{}), logs: logs}, nil
}

// waitExit records a container's termination and its back-off.
func (w *podWorker) waitExit(c *ctr, p *proc) {
	_ = p.cmd.Wait()
	finished := time.Now()
	code := exitCode(p.cmd.ProcessState)
	p.logs.wait()
	startErr := ""
	if code == container.StartErrorCode {
		startErr = strings.TrimSpace(readLimited(p.errorFile, 4096))
	}
	msg := strings.TrimSpace(readLimited(p.termLog, 4096))
	if msg == "" && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = p.logs.tail(80, 2048)
	}
	term := exitState(code, p.startedAt, finished, msg, startErr, p.instance)
	w.mu.Lock()
	if p.stopProbes != nil {
		p.stopProbes()
	}
	c.proc, c.exit, c.ready, c.started = nil, &term, false, false
	c.state = corev1.ContainerState{Terminated: &term}
	delay, next := crashBackoff(c.backoff, finished.Sub(p.startedAt), w.n.cfg.MaxBackoff)
	c.nextStart, c.backoff = finished.Add(delay), next
	w.mu.Unlock()
	close(p.exited)
	w.poke()
}

func exitCode(ps *os.ProcessState) int32 {
	if ps == nil {
		return 137
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

// stopContainer sends SIGTERM, waits up to grace, then kills the
// container's whole process group.
func stopContainer(p *proc, grace time.Duration) {
	if grace > 0 {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
}

// killAll stops every running container of the Pod concurrently.
func (w *podWorker) killAll(grace time.Duration) {
	w.mu.Lock()
	var procs []*proc
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if c.proc != nil {
			procs = append(procs, c.proc)
		}
	}
	w.mu.Unlock()
	done := make(chan struct{}, len(procs))
	for _, p := range procs {
		go func() {
			stopContainer(p, grace)
			done <- struct{}{}
		}()
	}
	for range procs {
		<-done
	}
}

// instancePaths are the host files of one container instance.
type instancePaths struct {
	spec, scratch, termLog, errorFile string
}

func (w *podWorker) instanceFiles(dir string, instance int32) (instancePaths, error) {
	n := itoa(instance)
	p := instancePaths{
		spec: filepath.Join(dir, "spec-"+n+".json"), scratch: filepath.Join(dir, "scratch-"+n),
		termLog: filepath.Join(dir, "termination-log-"+n), errorFile: filepath.Join(dir, "error-"+n),
	}
	if err := os.MkdirAll(p.scratch, 0o700); err != nil {
		return p, err
	}
	// World-writable like the kubelet's, so a non-root container can write
	// its termination message.
	if err := os.WriteFile(p.termLog, nil, 0o666); err != nil {
		return p, err
	}
	if err := os.Chmod(p.termLog, 0o666); err != nil {
		return p, err
	}
	// Older instances' files are no longer needed.
	if instance > 0 {
		old := itoa(instance - 1)
		_ = os.RemoveAll(filepath.Join(dir, "scratch-"+old))
		_ = os.Remove(filepath.Join(dir, "spec-"+old+".json"))
	}
	return p, nil
}

// prepareSources creates missing subPath sources (as the kubelet does) and
// marks single-file sources.
func prepareSources(mounts []container.Mount) error {
	for i := range mounts {
		m := &mounts[i]
		info, err := os.Stat(m.Source)
		if errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(m.Source, 0o777); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !info.IsDir() {
			m.File = true
		}
	}
	return nil
}

func readOnlyRoot(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
}

func readLimited(path string, limit int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, limit)
	n, _ := f.Read(buf)
	return string(buf[:n])
}
