// Package cleanup finds and removes everything a sandbox instance left on
// the host, from its id alone: processes tagged with its marker or living
// in its Pod network namespaces, the namespaces, its bridge and veths, and
// mounts under its directory. `sandbox down` runs it after stopping the
// daemon, so it also repairs the aftermath of a crash.
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

	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
)

// Leftovers is what an instance still has on the host.
type Leftovers struct {
	Processes  []int
	Namespaces []string
	Links      []string
	Mounts     []string
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Processes)+len(l.Namespaces)+len(l.Links)+len(l.Mounts) == 0
}

func (l Leftovers) String() string {
	return fmt.Sprintf("processes %v, network namespaces %v, links %v, mounts %v", l.Processes, l.Namespaces, l.Links, l.Mounts)
}

// Find lists the instance's leftovers.
func Find(in *instance.Instance) (Leftovers, error) {
	var l Leftovers
	var err error
	if l.Namespaces, err = netns.Namespaces(in.NetnsPrefix()); err != nil {
		return l, err
	}
	links, err := netns.Links(in.VethPrefix())
	if err != nil {
		return l, err
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", in.BridgeName())); err == nil {
		links = append(links, in.BridgeName())
	}
	l.Links = links
	if l.Mounts, err = MountsUnder(in.Dir); err != nil {
		return l, err
	}
	l.Processes = processes(in, l.Namespaces)
	return l, nil
}

// Remove kills the instance's processes and removes its namespaces, links
// and mounts, then its directory.
func Remove(ctx context.Context, in *instance.Instance) error {
	l, err := Find(in)
	if err != nil {
		return err
	}
	killAll(l.Processes)
	var errs []error
	for _, ns := range l.Namespaces {
		errs = append(errs, netns.DeleteNetns(ctx, ns))
	}
	for _, link := range l.Links {
		errs = append(errs, netns.DeleteLink(ctx, link))
	}
	errs = append(errs, unmountAll(in.Dir))
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

// processes finds processes carrying the marker or inside one of the
// instance's network namespaces.
func processes(in *instance.Instance, namespaces []string) []int {
	inodes := map[uint64]bool{}
	for _, ns := range namespaces {
		var st syscall.Stat_t
		if syscall.Stat(netns.Path(ns), &st) == nil {
			inodes[st.Ino] = true
		}
	}
	marker := []byte(in.Marker())
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !alive(pid) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && inodes[st.Ino] {
			pids = append(pids, pid)
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
