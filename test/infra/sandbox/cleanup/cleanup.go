// Package cleanup finds and removes everything a sandbox instance left on
// the host, from its id alone: every process in its cgroup subtree
// (containers and shims included) or tagged with its marker, the subtree
// itself, its network namespace and the link into it, and its directory.
// Mounts need no work: the sandbox's processes mount only inside their
// private mount namespace, which dies with the last of them. `sandbox down`
// runs it after stopping the daemon, so it also repairs the aftermath of a
// crash.
package cleanup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/cgroups"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/network"
)

// Leftovers is what an instance still has on the host.
type Leftovers struct {
	Processes []int
	Cgroups   []string
	Network   []string
	Mounts    []string
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Processes)+len(l.Cgroups)+len(l.Network)+len(l.Mounts) == 0
}

func (l Leftovers) String() string {
	return fmt.Sprintf("processes %v, cgroups %v, network %v, mounts %v", l.Processes, l.Cgroups, l.Network, l.Mounts)
}

// Find lists the instance's leftovers.
func Find(in *instance.Instance) (Leftovers, error) {
	var l Leftovers
	cg, err := cgroups.Detect()
	if err != nil {
		return l, err
	}
	rel := "/" + in.CgroupName()
	for _, root := range cg.Roots {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			l.Cgroups = append(l.Cgroups, filepath.Join(root, rel))
		}
	}
	l.Processes = append(cg.Procs(rel), marked(in)...)
	slices.Sort(l.Processes)
	l.Processes = slices.Compact(l.Processes)
	l.Network = network.Leftovers(in)
	if l.Mounts, err = MountsUnder(in.Dir); err != nil {
		return l, err
	}
	return l, nil
}

// Remove kills the instance's processes and removes its cgroups, network
// and mounts, then its directory.
func Remove(ctx context.Context, in *instance.Instance) error {
	cg, err := cgroups.Detect()
	if err != nil {
		return err
	}
	// The daemon first (it is tagged), so it starts nothing new while its
	// subtree is emptied.
	killAll(marked(in))
	var errs []error
	errs = append(errs, cg.Remove("/"+in.CgroupName()))
	killAll(marked(in))
	errs = append(errs, network.Delete(ctx, in), unmountAll(in.Dir))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return removeDir(in.Dir)
}

// killAll SIGKILLs pids and waits (bounded) until they are gone.
func killAll(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && alive(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// marked finds the processes carrying the instance's marker.
func marked(in *instance.Instance) []int {
	marker := []byte(in.Marker())
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !alive(pid) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, marker) }) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// MountsUnder lists mount points at or below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == prefix || strings.HasPrefix(mp, prefix+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, sc.Err()
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches whatever is mounted under dir on the host's side
// (nothing, unless a user mounted something there).
func unmountAll(dir string) error {
	mounts, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// removeDir deletes the sandbox directory, but only one the sandbox made
// (it holds instance.json) or an empty one, never a user's directory.
func removeDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "instance.json")); err != nil {
		if os.IsNotExist(err) {
			_ = os.Remove(dir) // only succeeds when empty
			return nil
		}
		return err
	}
	return os.RemoveAll(dir)
}
