package sandbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPartitionAndHeal: `partition` cuts an etcd member off from its peers
// and the host (the cluster keeps quorum without it), `heal` reconnects it
// and it catches up.
func TestPartitionAndHeal(t *testing.T) {
	t.Parallel()
	c := etcdCluster{ns: newNamespace(t), name: "mem", size: 3, storage: "memory"}
	c.create(t)
	ctx := context.Background()
	victim, err := k.CoreV1().Pods(c.ns).Get(ctx, c.member(2), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	healthURL := "http://" + victim.Status.PodIP + ":2379/health"
	victimEndpoint := "--endpoints=http://" + c.member(2) + "." + c.name + ":2379"

	if err := sb.Partition(ctx, c.ns, c.member(2)); err != nil {
		t.Fatal(err)
	}
	if out, err := c.etcdctl(t, 0, victimEndpoint, "endpoint", "health"); err == nil {
		t.Errorf("the partitioned member answers its peers: %s", out)
	}
	if resp, err := (&http.Client{Timeout: time.Second}).Get(healthURL); err == nil {
		resp.Body.Close()
		t.Errorf("the partitioned member answers the host")
	}
	if out, err := c.etcdctl(t, 0, "put", "during", "partition"); err != nil {
		t.Fatalf("two of three members lost quorum: %v: %s", err, out)
	}

	if err := sb.Heal(ctx, c.ns, c.member(2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the healed member to catch up", func() (bool, string) {
		out, _ := c.etcdctl(t, 2, "get", "during", "--consistency=s", "--print-value-only")
		return strings.TrimSpace(out) == "partition", out
	})
	// Its peer connections come back within etcd's own probing interval.
	waitFor(t, 30*time.Second, "the healed member healthy", func() (bool, string) {
		out, err := c.etcdctl(t, 0, victimEndpoint, "endpoint", "health")
		return err == nil, out
	})
	waitPod(t, c.ns, c.member(2), 30*time.Second, "Ready again", ready)
}
