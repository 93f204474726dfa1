package container

import (
	"encoding/json"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// RunExec is `sandbox exec-init SPEC`: it joins the namespaces and root of
// a running container and execs a command there as the container's user.
// The caller has locked the main goroutine to its thread; unsharing the
// thread's filesystem attributes is what lets a Go program join a mount
// namespace. It returns only on failure.
func RunExec(specJSON string) error {
	spec := &ExecSpec{}
	if err := json.Unmarshal([]byte(specJSON), spec); err != nil {
		return err
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	proc := "/proc/" + strconv.Itoa(spec.PID)
	// Open everything first: /proc/<pid> means something else once inside.
	rootFD, err := unix.Open(proc+"/root", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("container process %d: %w", spec.PID, err)
	}
	defer unix.Close(rootFD)
	for _, ns := range []struct {
		name string
		flag int
	}{{"net", unix.CLONE_NEWNET}, {"uts", unix.CLONE_NEWUTS}, {"mnt", unix.CLONE_NEWNS}} {
		if err := setns(proc+"/ns/"+ns.name, ns.flag); err != nil {
			return err
		}
	}
	if err := unix.Fchdir(rootFD); err != nil {
		return err
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return execAs(spec.Args, spec.Env, spec.WorkingDir, spec.UID, spec.GID, spec.Groups)
}

func setns(path string, flag int) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, flag); err != nil {
		return fmt.Errorf("setns %s: %w", path, err)
	}
	return nil
}
