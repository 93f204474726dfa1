package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunInit is `sandbox container-init SPEC`. The daemon starts it with new
// mount and UTS namespaces (Cloneflags) and the caller has locked the main
// goroutine to its thread, so the network namespace joined here is the one
// the exec'd entrypoint inherits. It returns only on failure.
func RunInit(specPath string) error {
	data, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	spec := &Spec{}
	if err := json.Unmarshal(data, spec); err != nil {
		return err
	}
	var errFile *os.File
	if spec.ErrorFile != "" {
		// Opened before the pivot: the host path is gone afterwards.
		if errFile, err = os.OpenFile(spec.ErrorFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
			return err
		}
	}
	err = startContainer(spec)
	if errFile != nil {
		_, _ = errFile.WriteString(err.Error())
		_ = errFile.Close()
	}
	return err
}

func startContainer(spec *Spec) error {
	if err := joinNetns(spec.NetnsPath); err != nil {
		return err
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("setting hostname: %w", err)
		}
	}
	// Nothing mounted from here on may show up on the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	root, err := mountRootfs(spec)
	if err != nil {
		return err
	}
	if err := mountSystem(root); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if err := bindMount(root, m); err != nil {
			return err
		}
	}
	if err := enterRoot(root, spec.ReadOnlyRootfs); err != nil {
		return err
	}
	return execAs(spec.Args, spec.Env, spec.WorkingDir, spec.UID, spec.GID, spec.Groups)
}

func joinNetns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the Pod's network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("joining the Pod's network namespace: %w", err)
	}
	return nil
}

// mountRootfs puts a tmpfs-backed overlay over the image: the container may
// write anywhere, the image stays untouched, and the writes vanish with the
// container like a runtime's writable layer.
func mountRootfs(spec *Spec) (string, error) {
	if err := unix.Mount("tmpfs", spec.Scratch, "tmpfs", 0, "mode=0755"); err != nil {
		return "", fmt.Errorf("mounting scratch tmpfs: %w", err)
	}
	upper, work, merged := filepath.Join(spec.Scratch, "upper"), filepath.Join(spec.Scratch, "work"), filepath.Join(spec.Scratch, "rootfs")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", spec.Rootfs, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mounting the image %s: %w", spec.Rootfs, err)
	}
	return merged, nil
}

// mountSystem gives the container /proc, a read-only /sys and a minimal
// /dev with the usual device nodes bound from the host.
func mountSystem(root string) error {
	type fs struct {
		target, fstype, data string
		flags                uintptr
	}
	for _, m := range []fs{
		{"proc", "proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sys", "sysfs", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY},
		{"dev", "tmpfs", "mode=0755,size=65536k", unix.MS_NOSUID},
	} {
		target := filepath.Join(root, m.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mounting /%s: %w", m.target, err)
		}
	}
	return populateDev(filepath.Join(root, "dev"))
}

func populateDev(dev string) error {
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bindMount(filepath.Dir(dev), Mount{Source: "/dev/" + name, Target: "/dev/" + name, File: true}); err != nil {
			return err
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	for _, d := range []string{"shm", "pts"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	return unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
}

// bindMount binds m.Source at m.Target under root, creating the mount point
// (in the overlay, so the image is not touched).
func bindMount(root string, m Mount) error {
	target := filepath.Join(root, m.Target)
	if err := createMountPoint(target, m.File); err != nil {
		return fmt.Errorf("creating mount point %s: %w", m.Target, err)
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

func createMountPoint(target string, file bool) error {
	if !file {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// enterRoot pivots into root and detaches the host's mounts, so the
// container holds no reference to them (or to other Pods' namespaces).
func enterRoot(root string, readOnly bool) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if readOnly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if err := unix.Mount("", "/", "", flags, ""); err != nil {
			return fmt.Errorf("making the root read-only: %w", err)
		}
	}
	return nil
}

// execAs creates the working directory, drops to the container's user and
// execs the entrypoint.
func execAs(args, env []string, dir string, uid, gid uint32, groups []uint32) error {
	if len(args) == 0 {
		return fmt.Errorf("no command: the image has no entrypoint and the container sets none")
	}
	if dir == "" {
		dir = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating working directory %s: %w", dir, err)
	}
	gs := make([]int, len(groups))
	for i, g := range groups {
		gs[i] = int(g)
	}
	if err := syscall.Setgroups(gs); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(int(uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("working directory %s: %w", dir, err)
	}
	path, err := lookPath(args[0], env)
	if err != nil {
		return err
	}
	return syscall.Exec(path, args, env)
}
