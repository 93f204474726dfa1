package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestBootstrap forms clusters of 1, 3 and 5 members from a single seed, and
// checks the objects around them: Services, the voters-only budget, labels.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-bootstrap")
	for _, n := range []int32{1, 3, 5} {
		t.Run(fmt.Sprintf("%d members", n), func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("boot%d", n)
			newCluster(t, ns, name, n)
			w := startWriter(t, ns, name)
			waitReconciled(t, ns, name, int(n), 3*time.Minute)
			w.mark("formed")
			checkBootstrapped(t, ns, name, int(n))
			w.verify("formed")
		})
	}
}

func checkBootstrapped(t *testing.T, ns, name string, n int) {
	t.Helper()
	c := getCluster(t, ns, name)
	if len(c.Status.ClusterID) != 16 || c.Status.Selector != manifest.SelectorString(name) {
		t.Errorf("status: clusterID=%q selector=%q", c.Status.ClusterID, c.Status.Selector)
	}
	seeds := 0
	for _, m := range members(t, ns, name) {
		if m.Spec.Bootstrap {
			seeds++
		}
		if !m.Status.IsVoter || len(m.Status.MemberID) != 16 || m.Status.Version != etcdVersion {
			t.Errorf("member %s: voter=%t id=%q version=%q", m.Name, m.Status.IsVoter, m.Status.MemberID, m.Status.Version)
		}
	}
	if seeds != 1 {
		t.Errorf("%d seed members, want 1", seeds)
	}
	for _, p := range pods(t, ns, name) {
		if p.Labels[manifest.LabelRole] != manifest.RoleVoter {
			t.Errorf("pod %s lacks the voter label the budget selects on", p.Name)
		}
	}
	// The sandbox's nodes (kubelet 1.36 or newer, containerd 2.4) mount
	// the operator's image; the integration tier's cannot (the operator
	// sees that in their versions), and the crash test's operator copies
	// its binary anyway.
	requireToolsVolume(t, ns, name, !integration())
	svc, err := kubectl("-n", ns, "get", "service", name, name+"-client", "-o", "jsonpath={.items[*].spec.clusterIP}")
	if err != nil {
		t.Errorf("services: %v %s", err, svc)
	}
	pdb, err := kubectl("-n", ns, "get", "pdb", name, "-o", "jsonpath={.spec.minAvailable}")
	if want := fmt.Sprint(n/2 + 1); err != nil || pdb != want {
		t.Errorf("budget minAvailable = %q (%v), want %s", pdb, err, want)
	}
}

// requireToolsVolume checks how the cluster's Pods got the operator's
// binary: its image mounted (fromImage), or a copy by an init container.
func requireToolsVolume(t *testing.T, ns, name string, fromImage bool) {
	t.Helper()
	for _, p := range pods(t, ns, name) {
		mounted := slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Image != nil })
		copied := slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == manifest.InstallToolsContainer })
		if mounted != fromImage || copied == fromImage {
			t.Errorf("pod %s: operator image mounted %t, binary copied %t; want mounted %t", p.Name, mounted, copied, fromImage)
		}
	}
}
