package node

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
)

// volumeInfo is a prepared volume on the host.
type volumeInfo struct {
	Path string
	// ReadOnly is set for the API-data volumes (secret, configMap,
	// projected, downwardAPI), which the kubelet always mounts read-only.
	ReadOnly bool
}

// podFiles are the per-Pod files bound into every container.
type podFiles struct {
	Hosts, Resolv, NSSwitch, Hostname string
}

const defaultTerminationMessagePath = "/dev/termination-log"

// mountPlan lists a container's bind mounts: its volumeMounts (subPath
// and readOnly included), the Pod's /etc files unless a volume covers them,
// and the termination log. Parents come before children.
func mountPlan(c *corev1.Container, vols map[string]volumeInfo, files podFiles, termLog string, env []string) ([]container.Mount, error) {
	var out []container.Mount
	lookup := envLookup(env)
	for _, vm := range c.VolumeMounts {
		vol, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q: no volume of that name in the Pod", vm.Name)
		}
		src, err := subPathSource(vol.Path, vm, lookup)
		if err != nil {
			return nil, err
		}
		out = append(out, container.Mount{Source: src, Target: path.Clean(vm.MountPath), ReadOnly: vm.ReadOnly || vol.ReadOnly})
	}
	for _, f := range []struct{ target, source string }{
		{"/etc/hosts", files.Hosts}, {"/etc/resolv.conf", files.Resolv},
		{"/etc/nsswitch.conf", files.NSSwitch}, {"/etc/hostname", files.Hostname},
	} {
		if f.source != "" && !covered(out, f.target) {
			out = append(out, container.Mount{Source: f.source, Target: f.target, File: true})
		}
	}
	if termLog != "" {
		target := c.TerminationMessagePath
		if target == "" {
			target = defaultTerminationMessagePath
		}
		out = append(out, container.Mount{Source: termLog, Target: path.Clean(target), File: true})
	}
	slices.SortStableFunc(out, func(a, b container.Mount) int { return depth(a.Target) - depth(b.Target) })
	return out, nil
}

// subPathSource resolves subPath or subPathExpr inside the volume, refusing
// anything that would leave it.
func subPathSource(volPath string, vm corev1.VolumeMount, lookup func(string) (string, bool)) (string, error) {
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		sub = expand(vm.SubPathExpr, lookup)
	}
	if sub == "" {
		return volPath, nil
	}
	if path.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..") {
		return "", fmt.Errorf("volumeMount %q: subPath %q must be a relative path inside the volume", vm.Name, sub)
	}
	return filepath.Join(volPath, sub), nil
}

// covered reports whether a mount already provides target or a parent of it.
func covered(mounts []container.Mount, target string) bool {
	for _, m := range mounts {
		if m.Target == target || strings.HasPrefix(target, strings.TrimSuffix(m.Target, "/")+"/") {
			return true
		}
	}
	return false
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }
