// Package cgroups gives each sandbox a cgroup subtree of its own,
// /sandbox-<id> in every hierarchy: the daemon and everything it starts live
// in <subtree>/daemon, and node i's kubelet roots its Pods' cgroups at
// <subtree>/node-i. So every process of a sandbox, container processes
// included, can be found, frozen and killed from the subtree alone, and
// removing the subtree leaves the machine's cgroups as they were. Both
// cgroup v1 (also hybrid, with a v2 hierarchy beside the v1 ones) and a
// pure v2 host are handled.
package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Host is the machine's cgroup layout.
type Host struct {
	// V2 is true on a host with the unified hierarchy only.
	V2 bool
	// Roots are the mount points of every hierarchy (v1 controllers, named
	// v1 hierarchies and the v2 one).
	Roots []string
	// freezer is the hierarchy that can freeze (v1's freezer or v2's root).
	freezer string
	// cpuset is v1's cpuset hierarchy, whose new cgroups need cpus and mems.
	cpuset string
}

// Detect reads the cgroup mounts of this process's mount namespace.
func Detect() (*Host, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f)
}

// parse reads a mountinfo file.
func parse(r io.Reader) (*Host, error) {
	h := &Host{}
	var v2root string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+3 >= len(fields) || fields[3] != "/" {
			continue
		}
		mp, fstype, opts := fields[4], fields[sep+1], fields[sep+3]
		switch fstype {
		case "cgroup2":
			v2root = mp
			h.Roots = append(h.Roots, mp)
		case "cgroup":
			h.Roots = append(h.Roots, mp)
			h.noteController(mp, opts)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(h.Roots) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	if h.freezer == "" && v2root != "" && len(h.Roots) == 1 {
		h.V2, h.freezer = true, v2root
	}
	if h.freezer == "" {
		return nil, errors.New("no freezer: neither a v1 freezer hierarchy nor a pure cgroup v2 host")
	}
	return h, nil
}

// noteController remembers the v1 hierarchies that need special care.
func (h *Host) noteController(mp, opts string) {
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "freezer":
			h.freezer = mp
		case "cpuset":
			h.cpuset = mp
		}
	}
}

// Version is "v1" or "v2", for the kubelet's configuration and the logs.
func (h *Host) Version() string {
	if h.V2 {
		return "v2"
	}
	return "v1"
}

// Create makes rel (a path such as /sandbox-x/node-0) in every hierarchy,
// with its parents. New v1 cpuset cgroups get their parent's cpus and mems
// (they start empty and would refuse tasks); on v2, the controllers of the
// root are delegated down to rel.
func (h *Host) Create(rel string) error {
	for _, root := range h.Roots {
		if err := h.createIn(root, strings.Split(strings.Trim(rel, "/"), "/")); err != nil {
			return err
		}
	}
	return nil
}

// createIn makes the path parts below one hierarchy's root.
func (h *Host) createIn(root string, parts []string) error {
	dir := root
	for _, p := range parts {
		if h.V2 {
			if err := delegate(dir); err != nil {
				return err
			}
		}
		dir = filepath.Join(dir, p)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if root != h.cpuset {
			continue
		}
		if err := inheritCpuset(dir); err != nil {
			return err
		}
	}
	if h.V2 {
		return delegate(dir)
	}
	return nil
}

// delegate enables in dir's children every controller dir has.
func delegate(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var enable []string
	for _, c := range strings.Fields(string(data)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644)
}

func inheritCpuset(dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(cur)) != "" {
			continue
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
			return fmt.Errorf("copying %s into %s: %w", f, dir, err)
		}
	}
	return nil
}

// Join moves pid into rel in every hierarchy.
func (h *Host) Join(rel string, pid int) error {
	for _, root := range h.Roots {
		file := filepath.Join(root, rel, "cgroup.procs")
		if err := os.WriteFile(file, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving process %d into %s: %w", pid, filepath.Join(root, rel), err)
		}
	}
	return nil
}

// Exists reports whether rel exists in any hierarchy.
func (h *Host) Exists(rel string) bool {
	for _, root := range h.Roots {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			return true
		}
	}
	return false
}

// Freeze freezes (or thaws) every process below rel and waits until the
// kernel says it is done.
func (h *Host) Freeze(rel string, frozen bool) error {
	dir := filepath.Join(h.freezer, rel)
	file, want, wait := "freezer.state", "THAWED", "THAWED"
	if frozen {
		want, wait = "FROZEN", "FROZEN"
	}
	if h.V2 {
		file, want = "cgroup.freeze", "0"
		if frozen {
			want = "1"
		}
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(want), 0o644); err != nil {
		return fmt.Errorf("freezing %s: %w", dir, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if h.state(dir) == wait {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become %s", dir, wait)
}

// state is "FROZEN" or "THAWED" (v1 also passes through "FREEZING").
func (h *Host) state(dir string) string {
	if h.V2 {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err == nil && strings.Contains(string(data), "frozen 1") {
			return "FROZEN"
		}
		return "THAWED"
	}
	data, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
	return strings.TrimSpace(string(data))
}

// Procs lists the processes anywhere below rel, in any hierarchy.
func (h *Host) Procs(rel string) []int {
	seen := map[int]bool{}
	for _, root := range h.Roots {
		_ = filepath.WalkDir(filepath.Join(root, rel), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// Remove kills every process below rel (thawing it first: a frozen process
// cannot die) and removes rel from every hierarchy, deepest cgroups first.
func (h *Host) Remove(rel string) error {
	if !h.Exists(rel) {
		return nil
	}
	thawAll(filepath.Join(h.freezer, rel), h)
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := h.Procs(rel)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in cgroup %s do not die", pids, rel)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var errs []error
	for _, root := range h.Roots {
		errs = append(errs, removeTree(filepath.Join(root, rel), deadline))
	}
	return errors.Join(errs...)
}

// thawAll thaws every frozen cgroup below dir (a v1 child can be frozen on
// its own).
func thawAll(dir string, h *Host) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if h.state(path) != "THAWED" {
			rel, _ := filepath.Rel(h.freezer, path)
			_ = h.Freeze("/"+rel, false)
		}
		return nil
	})
}

// removeTree removes a cgroup directory and its children, deepest first.
// A cgroup whose last process just died can refuse removal for a moment.
func removeTree(dir string, deadline time.Time) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("removing cgroup %s: %w", d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
