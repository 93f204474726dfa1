//go:build linux

package procnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// rootfs builds a container's file system once, for all its runs: the
// image's files, /dev, /proc, /tmp, /etc/hosts (the environment's) and
// the volume mounts, each a bind mount in the environment's namespace.
func (r *podRunner) rootfs(c corev1.Container, img Image) (string, error) {
	root := filepath.Join(r.dir, "containers", c.Name, "root")
	if _, err := os.Stat(filepath.Join(root, ".built")); err == nil {
		return root, nil
	}
	if err := r.baseFS(root); err != nil {
		return "", err
	}
	paths := make([]string, 0, len(img.Files))
	for p := range img.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := r.bindFile(img.Files[p], filepath.Join(root, p), true); err != nil {
			return "", fmt.Errorf("image file %s: %w", p, err)
		}
	}
	for _, vm := range c.VolumeMounts {
		if err := r.mountVolume(root, vm); err != nil {
			return "", err
		}
	}
	return root, os.WriteFile(filepath.Join(root, ".built"), nil, 0o644)
}

// baseFS makes what every container has: /dev with the usual devices and
// a termination log, /proc, /tmp, /etc/hosts and /etc/resolv.conf.
func (r *podRunner) baseFS(root string) error {
	for _, d := range []string{"dev", "proc", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	if err := r.mount("tmpfs", filepath.Join(root, "dev"), "tmpfs", 0, "mode=755"); err != nil {
		return err
	}
	for _, dev := range []string{"null", "zero", "random", "urandom", "full"} {
		if err := r.bindFile("/dev/"+dev, filepath.Join(root, "dev", dev), false); err != nil {
			return err
		}
	}
	if err := r.mount("/proc", filepath.Join(root, "proc"), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	if err := r.bindFile(r.k.hostsFile, filepath.Join(root, "etc", "hosts"), true); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "etc", "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644)
}

// mountVolume binds a volume (or its subPath) at its mount path.
func (r *podRunner) mountVolume(root string, vm corev1.VolumeMount) error {
	r.mu.Lock()
	src, ok := r.volumes[vm.Name]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("volume mount %q names no volume of the Pod", vm.Name)
	}
	if vm.SubPath != "" {
		src = filepath.Join(src, vm.SubPath)
		if err := os.MkdirAll(src, 0o777); err != nil {
			return err
		}
	}
	target := filepath.Join(root, vm.MountPath)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := r.mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	if vm.ReadOnly {
		if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", vm.MountPath, err)
		}
	}
	return nil
}

// bindFile binds a file of this machine at target, read-only if asked.
func (r *podRunner) bindFile(src, target string, readOnly bool) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		return err
	}
	if err := r.mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	if readOnly {
		return syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
	}
	return nil
}

// mount mounts and remembers the mount, to undo it when the Pod goes.
func (r *podRunner) mount(src, target, fstype string, flags uintptr, data string) error {
	if err := syscall.Mount(src, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", src, target, err)
	}
	r.mu.Lock()
	r.mounts = append(r.mounts, target)
	r.mu.Unlock()
	return nil
}

func unmount(target string) error {
	err := syscall.Unmount(target, syscall.MNT_DETACH)
	if err == syscall.EINVAL || err == syscall.ENOENT {
		return nil
	}
	return err
}
