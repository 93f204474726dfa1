package sandbox_test

import (
	"strings"
	"testing"
	"time"
)

// TestEtcdClusterOnClaims: three etcd Pods behind a headless Service find
// each other through CoreDNS, form a cluster that answers `etcdctl
// member list` through kubectl exec, and a member deleted and recreated on
// its claim comes back with its data.
func TestEtcdClusterOnClaims(t *testing.T) {
	t.Parallel()
	c := etcdCluster{ns: newNamespace(t), name: "etcd", size: 3, storage: "pvc"}
	c.create(t)

	list, err := c.etcdctl(t, 0, "member", "list")
	if err != nil {
		t.Fatalf("member list: %v\n%s", err, list)
	}
	for i := range c.size {
		if !strings.Contains(list, c.member(i)+", "+c.peerURL(i)) {
			t.Errorf("member list lacks started member %s:\n%s", c.member(i), list)
		}
	}
	if out, err := c.etcdctl(t, 0, "put", "survives", "yes"); err != nil {
		t.Fatalf("put: %v\n%s", err, out)
	}
	waitFor(t, 10*time.Second, "member 1 to apply the write", func() (bool, string) {
		out, _ := c.etcdctl(t, 1, "get", "survives", "--consistency=s", "--print-value-only")
		return strings.TrimSpace(out) == "yes", out
	})

	// A member whose data dir survived rejoins with the same identity; with
	// an empty one it could not (initial-cluster-state=new on a formed
	// cluster), so Ready again proves the claim kept the data.
	deletePodAndWait(t, c.ns, c.member(1))
	createPod(t, c.ns, c.pod(1))
	waitPod(t, c.ns, c.member(1), 60*time.Second, "Ready again", ready)
	out, err := c.etcdctl(t, 1, "get", "survives", "--consistency=s", "--print-value-only")
	if err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("after the restart, member 1 has survives=%q (%v)", out, err)
	}
	after, err := c.etcdctl(t, 0, "member", "list")
	if err != nil || after != list {
		t.Errorf("membership changed across the restart:\nbefore:\n%s\nafter:\n%s (%v)", list, after, err)
	}
}
