package node

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
)

// netnsProcesses lists the processes inside a named network namespace:
// every container and exec'd process of the Pod, whatever it forked.
func netnsProcesses(name string) []int {
	var st syscall.Stat_t
	if err := syscall.Stat(netns.Path(name), &st); err != nil {
		return nil
	}
	return processesInNetns(st.Ino)
}

// processesInNetns lists the processes whose network namespace has inode ino.
func processesInNetns(ino uint64) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killNetnsProcesses SIGKILLs everything left in a Pod's namespace.
func killNetnsProcesses(name string) {
	for _, pid := range netnsProcesses(name) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
