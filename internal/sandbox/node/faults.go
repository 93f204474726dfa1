package node

import (
	"context"
	"fmt"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
)

// HasPod reports whether ns/name runs on this node.
func (n *Node) HasPod(ns, name string) bool {
	_, ok := n.worker(ns, name)
	return ok
}

// KillContainer SIGKILLs one container of a Pod (every container when name
// is empty); the node restarts it by the Pod's policy.
func (n *Node) KillContainer(ns, pod, name string) error {
	w, ok := n.worker(ns, pod)
	if !ok {
		return fmt.Errorf("pod %s/%s is not running on %s", ns, pod, n.name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	killed := 0
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if (name == "" || c.spec.Name == name) && c.proc != nil {
			_ = syscall.Kill(-c.proc.pid, syscall.SIGKILL)
			_ = syscall.Kill(c.proc.pid, syscall.SIGKILL)
			killed++
		}
	}
	if killed == 0 {
		return fmt.Errorf("pod %s/%s has no running container %q", ns, pod, name)
	}
	return nil
}

// SetPodLink brings the host side of a Pod's veth down (partition) or up
// (heal).
func (n *Node) SetPodLink(ctx context.Context, ns, pod string, up bool) error {
	w, ok := n.worker(ns, pod)
	if !ok {
		return fmt.Errorf("pod %s/%s is not running on %s", ns, pod, n.name)
	}
	w.mu.Lock()
	pn := w.net
	w.mu.Unlock()
	if pn == nil {
		return fmt.Errorf("pod %s/%s has no network yet", ns, pod)
	}
	return netns.SetLink(ctx, pn.Veth, up)
}
