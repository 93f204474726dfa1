package sandbox_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestPartitionPorts: a port partition of Pod a on 2380 (an etcd member's
// peer port) cuts a's TCP traffic on 2380 both ways, whoever listens: no
// one reaches a:2380, and a reaches no one's 2380, across its own node's
// bridge and across nodes; a's 2379 and the other Pods' 2380 stay open.
// Cuts add up, and one heal lifts them all.
func TestPartitionPorts(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			dumpFaultTable(t)
		}
	})
	// a and b share node-0's bridge (bridged traffic); c is on node-1
	// (routed between bridges).
	onNode := func(node string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node} }
	}
	for name, node := range map[string]string{"a": "node-0", "b": "node-0", "c": "node-1"} {
		createPod(t, ns, helperPod(name, []string{"serve", "2380", "2379"}, onNode(node)))
	}
	ips := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		ips[name] = waitPod(t, ns, name, 30*time.Second, "Running", running).Status.PodIP
	}
	n := peerNet{t: t, ns: ns, ips: ips}
	// Everything is open at first: the cuts below are the fault's doing.
	n.open("a", "b", 2380)
	n.open("b", "a", 2380)

	if err := sb.PartitionPorts(ctx, ns, "a", 2380); err != nil {
		t.Fatal(err)
	}
	n.cut("b", "a", 2380) // a listening
	n.cut("a", "b", 2380) // a dialing
	n.cut("c", "a", 2380)
	n.cut("a", "c", 2380)
	n.cut("host", "a", 2380)
	n.open("a", "b", 2379)
	n.open("b", "a", 2379)
	n.open("a", "c", 2379)
	n.open("c", "a", 2379)
	n.open("host", "a", 2379)
	n.open("b", "c", 2380)

	if err := sb.PartitionPorts(ctx, ns, "a", 2379); err != nil {
		t.Fatal(err)
	}
	n.cut("b", "a", 2379)
	n.cut("a", "b", 2380)

	if err := sb.Heal(ctx, ns, "a"); err != nil {
		t.Fatal(err)
	}
	n.open("b", "a", 2380)
	n.open("a", "b", 2380)
	n.open("c", "a", 2380)
	n.open("a", "c", 2380)
	n.open("host", "a", 2380)
	n.open("b", "a", 2379)
	n.open("a", "b", 2379)

	// A Pod deleted while cut is healed by its name all the same, and its
	// address leaves the fault table, so no later Pod given that address
	// starts cut off.
	if err := sb.PartitionPorts(ctx, ns, "b", 2380); err != nil {
		t.Fatal(err)
	}
	if err := sb.Partition(ctx, ns, "b"); err != nil {
		t.Fatal(err)
	}
	deletePodAndWait(t, ns, "b")
	if err := sb.Heal(ctx, ns, "b"); err != nil {
		t.Fatalf("heal of a Pod deleted while cut: %v", err)
	}
	in := sb.Instance()
	out, err := exec.Command("ip", "netns", "exec", in.NetnsName(), "nft", "list", "table", "inet", "sandbox-faults").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	if regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(ips["b"]) + `([^0-9.]|$)`).Match(out) {
		t.Errorf("the deleted Pod's address %s is still in the fault table:\n%s", ips["b"], out)
	}
	if err := sb.Heal(ctx, ns, "b"); err == nil {
		t.Error("a second heal of a Pod that is gone and has no cuts left succeeded; it should say the Pod is not found")
	}
}

// peerNet checks TCP connections between the test's Pods (by name) and the
// host ("host").
type peerNet struct {
	t   *testing.T
	ns  string
	ips map[string]string
}

// get fetches to's port from from with a 2 s timeout and returns the
// answer or what went wrong.
func (n peerNet) get(from, to string, port int) (string, error) {
	url := fmt.Sprintf("http://%s:%d/", n.ips[to], port)
	if from != "host" {
		out, err := execIn(n.t, n.ns, from, "/bin/helper", "get", url)
		return strings.TrimSpace(out), err
	}
	// A transport of its own: no connection is reused from an earlier check.
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return err.Error(), err
	}
	defer resp.Body.Close()
	return resp.Status, nil
}

// open waits for from to reach to's port.
func (n peerNet) open(from, to string, port int) {
	n.t.Helper()
	waitFor(n.t, 20*time.Second, fmt.Sprintf("%s to reach %s:%d", from, to, port), func() (bool, string) {
		out, err := n.get(from, to, port)
		return err == nil, out
	})
}

// cut checks that from's connection to to's port times out, as it does
// when its packets are dropped. Anything else fails: an answer, a refused
// connection (the port would be closed, not cut), or kubectl exec failing
// before the helper tried.
func (n peerNet) cut(from, to string, port int) {
	n.t.Helper()
	out, err := n.get(from, to, port)
	timedOut := err != nil && strings.Contains(strings.ToLower(out), "timeout")
	if from != "host" {
		timedOut = timedOut && strings.Contains(out, "helper:")
	}
	if !timedOut {
		n.t.Errorf("%s reaches %s:%d through the partition, or failed otherwise than by a timeout: %v: %s", from, to, port, err, out)
	}
}

// dumpFaultTable logs the sandbox's fault rules and what they hold.
func dumpFaultTable(t *testing.T) {
	in := sb.Instance()
	out, err := exec.Command("ip", "netns", "exec", in.NetnsName(), "nft", "list", "table", "inet", "sandbox-faults").CombinedOutput()
	t.Logf("fault table (err %v):\n%s", err, out)
}
