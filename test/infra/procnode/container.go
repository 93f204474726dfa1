//go:build linux

package procnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// process is one run of a container.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// stop sends SIGTERM to the container's first process, as a container
// runtime does (it passes it on, or not), and SIGKILL to all of the
// container's processes at the deadline if it is still there.
func (p *process) stop(deadline time.Time) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Until(deadline)):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// runOnce runs a container once, reporting its states; it returns the exit
// code, and ok false when the Pod is going (the process then was stopped).
func (r *podRunner) runOnce(c corev1.Container, report func(corev1.ContainerStatus)) (int32, bool) {
	var p *process
	var root string
	for p == nil {
		var reason string
		var err error
		p, root, reason, err = r.start(c)
		if err != nil {
			report(waiting(c, reason, err.Error()))
			select {
			case <-r.stopping:
				return 0, false
			case <-r.ctx.Done():
				return 0, false
			case <-time.After(2 * time.Second):
			}
		}
	}
	started := metav1.Now()
	report(corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Started: ptrTrue(),
		ContainerID: fmt.Sprintf("procnode://%d", p.cmd.Process.Pid), Ready: c.ReadinessProbe == nil,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}})
	probeDone := make(chan struct{})
	go r.probe(c, p, probeDone)
	defer close(probeDone)
	going := false
	select {
	case <-p.exited:
	case <-r.stopping:
		going = true
		p.stop(time.Now().Add(r.grace))
	case <-r.ctx.Done():
		going = true
		p.stop(time.Now())
	}
	// What the first process leaves behind ends with it, as a PID
	// namespace's processes end with its first.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	r.mu.Lock()
	delete(r.procs, c.Name)
	r.mu.Unlock()
	code := exitCode(p.err)
	term := &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: started, FinishedAt: metav1.Now(),
		Reason: "Completed", ContainerID: fmt.Sprintf("procnode://%d", p.cmd.Process.Pid)}
	if code != 0 {
		term.Reason = "Error"
	}
	term.Message = r.terminationMessage(c, root, code)
	if !going {
		report(corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Started: ptrFalse(),
			State: corev1.ContainerState{Terminated: term}})
	}
	return code, !going
}

func ptrTrue() *bool  { t := true; return &t }
func ptrFalse() *bool { f := false; return &f }

func exitCode(err error) int32 {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int32(ws.Signal())
		}
		return int32(exit.ExitCode())
	}
	if err != nil {
		return 128
	}
	return 0
}

// start prepares a container's file system and starts its process. On
// failure it returns the waiting reason a kubelet would show.
func (r *podRunner) start(c corev1.Container) (*process, string, string, error) {
	img, ok := r.k.image(c.Image)
	if !ok {
		return nil, "", "ErrImagePull", fmt.Errorf("image %q is not on this node (procnode has %s)", c.Image, strings.Join(r.k.imageRefs(), ", "))
	}
	pod := r.current()
	uid, gid, groups, err := credentials(pod, c, img)
	if err != nil {
		return nil, "", "CreateContainerConfigError", err
	}
	env, err := r.environment(pod, c, img)
	if err != nil {
		return nil, "", "CreateContainerConfigError", err
	}
	root, err := r.rootfs(c, img)
	if err != nil {
		return nil, "", "CreateContainerError", err
	}
	argv := commandLine(c, img, env)
	if len(argv) == 0 {
		return nil, "", "CreateContainerError", errors.New("no command: neither the container nor its image names one")
	}
	exe, err := lookPath(root, argv[0], env)
	if err != nil {
		return nil, "", "CreateContainerError", err
	}
	for i := range argv[1:] {
		argv[i+1] = bindToPodIP(argv[i+1], r.ip)
	}
	logf, err := r.openRun(c, root)
	if err != nil {
		return nil, "", "CreateContainerError", err
	}
	cmd := exec.Command(exe, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Dir = "/"
	if c.WorkingDir != "" {
		cmd.Dir = c.WorkingDir
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Setpgid: true, Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, "", "RunContainerError", fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	r.mu.Lock()
	r.procs[c.Name] = p
	r.mu.Unlock()
	return p, root, "", nil
}

// openRun prepares a run of a container: its log (the last run's kept for
// kubectl logs --previous) and an empty termination log, which any user of
// the container may write, as the kubelet's bind-mounted file allows.
func (r *podRunner) openRun(c corev1.Container, root string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(r.logPath(c.Name)), 0o755); err != nil {
		return nil, err
	}
	termLog := filepath.Join(root, "dev", "termination-log")
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		return nil, err
	}
	if err := os.Chmod(termLog, 0o666); err != nil {
		return nil, err
	}
	_ = os.Rename(r.logPath(c.Name), r.logPath(c.Name)+".previous")
	return os.OpenFile(r.logPath(c.Name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
}

func (k *kubelet) imageRefs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.images))
	for ref := range k.images {
		out = append(out, ref)
	}
	return out
}

// credentials are the user and groups a container runs as; a container
// that must not run as root but would is refused, as the kubelet refuses it.
func credentials(pod *corev1.Pod, c corev1.Container, img Image) (uint32, uint32, []uint32, error) {
	uid, gid := img.User, img.Group
	nonRoot := false
	var groups []uint32
	if ps := pod.Spec.SecurityContext; ps != nil {
		if ps.RunAsUser != nil {
			uid = *ps.RunAsUser
		}
		if ps.RunAsGroup != nil {
			gid = *ps.RunAsGroup
		}
		if ps.RunAsNonRoot != nil {
			nonRoot = *ps.RunAsNonRoot
		}
		if ps.FSGroup != nil {
			groups = append(groups, uint32(*ps.FSGroup))
		}
		for _, g := range ps.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
	}
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			uid = *cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			gid = *cs.RunAsGroup
		}
		if cs.RunAsNonRoot != nil {
			nonRoot = *cs.RunAsNonRoot
		}
	}
	if nonRoot && uid == 0 {
		return 0, 0, nil, errors.New("container has runAsNonRoot and image will run as root")
	}
	return uint32(uid), uint32(gid), groups, nil
}

// commandLine is the container's command as Kubernetes composes it from
// the container and the image, with $(VAR) references expanded.
func commandLine(c corev1.Container, img Image, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	cmd := c.Command
	if len(cmd) == 0 {
		cmd = img.Entrypoint
	}
	out := make([]string, 0, len(cmd)+len(c.Args))
	for _, a := range append(append([]string(nil), cmd...), c.Args...) {
		out = append(out, expand(a, vars))
	}
	return out
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand replaces $(NAME) with the variable's value ($$ escapes a $); an
// unknown reference stays as written, as Kubernetes leaves it.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// lookPath finds a command in the container's file system: an absolute
// path as it is, a bare name through the container's PATH.
func lookPath(root, name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			return "", fmt.Errorf("exec: %q: no such file or directory", name)
		}
		return name, nil
	}
	search := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			search = v
		}
	}
	for _, dir := range filepath.SplitList(search) {
		p := path.Join(dir, name)
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

var wildcardListen = regexp.MustCompile(`(0\.0\.0\.0:|\[::\]:|^:|=:|//:)(\d+)`)

// bindToPodIP points a listen address without a host at the Pod's own
// address. In a real Pod such an address binds the Pod's network namespace;
// here every Pod shares the machine's, so two etcd members both listening
// on 0.0.0.0:2379 would collide.
func bindToPodIP(arg, ip string) string {
	return wildcardListen.ReplaceAllStringFunc(arg, func(m string) string {
		sub := wildcardListen.FindStringSubmatch(m)
		prefix := ""
		switch sub[1] {
		case "=:":
			prefix = "="
		case "//:":
			prefix = "//"
		}
		return prefix + ip + ":" + sub[2]
	})
}

// terminationMessage is what the kubelet reports for a finished run: the
// file at terminationMessagePath, or with FallbackToLogsOnError and a
// failure, the end of the log (at most 80 lines or 2048 bytes).
func (r *podRunner) terminationMessage(c corev1.Container, root string, code int32) string {
	msgPath := c.TerminationMessagePath
	if msgPath == "" {
		msgPath = corev1.TerminationMessagePathDefault
	}
	if b, err := os.ReadFile(filepath.Join(root, msgPath)); err == nil && len(b) > 0 {
		if len(b) > 4096 {
			b = b[:4096]
		}
		return string(b)
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || code == 0 {
		return ""
	}
	b, err := os.ReadFile(r.logPath(c.Name))
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	out := bytes.Join(lines, []byte("\n"))
	if len(out) > 2048 {
		out = out[len(out)-2048:]
	}
	return string(out)
}
