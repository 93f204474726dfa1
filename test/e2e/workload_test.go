package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// writer writes keys to a cluster without pause while a scenario runs, and
// remembers every write etcd acknowledged. At the end each of them must be
// there: a scenario may make writes fail, never lose one that succeeded.
type writer struct {
	t       *testing.T
	ns      string
	cluster string

	mu     sync.Mutex
	acked  map[string]string
	failed int
	stop   chan struct{}
	done   chan struct{}
}

func startWriter(t *testing.T, ns, cluster string) *writer {
	t.Helper()
	w := &writer{t: t, ns: ns, cluster: cluster, acked: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) run() {
	defer close(w.done)
	var c *clientv3.Client
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	refresh := time.Now()
	for seq := 0; ; seq++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if c == nil || time.Since(refresh) > time.Second {
			c = w.reconnect(c)
			refresh = time.Now()
		}
		if c != nil {
			w.put(c, seq)
		}
	}
}

// reconnect points the client at the cluster's current Pods.
func (w *writer) reconnect(c *clientv3.Client) *clientv3.Client {
	eps := podEndpoints(w.t, w.ns, w.cluster)
	if len(eps) == 0 {
		return c
	}
	if c != nil {
		c.SetEndpoints(eps...)
		return c
	}
	nc, err := clusterClient(w.t, w.ns, w.cluster)
	if err != nil {
		return nil
	}
	return nc
}

func (w *writer) put(c *clientv3.Client, seq int) {
	key, value := fmt.Sprintf("e2e/%s/%08d", w.cluster, seq), fmt.Sprintf("v%d-%d", seq, time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Put(ctx, key, value)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed++
		return
	}
	w.acked[key] = value
}

// verify stops the writer and checks that every acknowledged write is in the
// cluster now, and that there were some.
func (w *writer) verify(minAcked int) {
	w.t.Helper()
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.acked) < minAcked {
		w.t.Fatalf("only %d writes were acknowledged (%d failed); the scenario did not run under load", len(w.acked), w.failed)
	}
	c, err := clusterClient(w.t, w.ns, w.cluster)
	if err != nil {
		w.t.Fatalf("connecting to verify writes: %v", err)
	}
	defer func() { _ = c.Close() }()
	var resp *clientv3.GetResponse
	eventually(w.t, time.Minute, "reading back the writes", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err = c.Get(ctx, "e2e/"+w.cluster+"/", clientv3.WithPrefix())
		return err == nil, fmt.Sprint(err)
	})
	have := map[string]string{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	lost := 0
	for key, value := range w.acked {
		if have[key] != value {
			lost++
			if lost <= 5 {
				w.t.Errorf("acknowledged write lost: %s=%s (have %q)", key, value, have[key])
			}
		}
	}
	if lost > 0 {
		w.t.Errorf("%d of %d acknowledged writes lost", lost, len(w.acked))
	}
	w.t.Logf("writer: %d writes acknowledged and all present, %d failed during the scenario", len(w.acked), w.failed)
}

// clientTLS holds the client TLS configuration of clusters that use TLS,
// by namespace/name; the suites of such clusters register it.
var clientTLS sync.Map

// podEndpoints are the client URLs of the cluster's running Pods, by their
// DNS names (TLS verifies those); clusterClient dials them at the Pods' IPs,
// as the test runs on the host, which has no cluster DNS.
func podEndpoints(t *testing.T, ns, cluster string) []string {
	scheme := "http"
	if _, ok := clientTLS.Load(ns + "/" + cluster); ok {
		scheme = "https"
	}
	var out []string
	for _, p := range pods(t, ns, cluster) {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out = append(out, fmt.Sprintf("%s://%s.%s.%s.svc:2379", scheme, p.Name, cluster, ns))
		}
	}
	return out
}

// podAddress maps a member's DNS name to its Pod's IP, looked up at dial time.
func podAddress(t *testing.T, ns, cluster string) func(string) (string, bool) {
	return func(host string) (string, bool) {
		name, _, _ := strings.Cut(host, ".")
		p, ok := pods(t, ns, cluster)[name]
		return p.Status.PodIP, ok && p.Status.PodIP != ""
	}
}

// clusterClient connects to the cluster's Pods, with its TLS if it has one.
func clusterClient(t *testing.T, ns, cluster string) (*clientv3.Client, error) {
	eps := podEndpoints(t, ns, cluster)
	if len(eps) == 0 {
		return nil, fmt.Errorf("no pods")
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(etcd.ResolvingDialer(podAddress(t, ns, cluster)))}}
	if v, ok := clientTLS.Load(ns + "/" + cluster); ok {
		cfg.TLS = v.(*tls.Config)
	}
	return clientv3.New(cfg)
}

// etcdMemberList asks the cluster for its membership.
func etcdMemberList(t *testing.T, ns, cluster string) ([]*etcdserverpb.Member, error) {
	c, err := clusterClient(t, ns, cluster)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Members, nil
}

// count is the number of acknowledged writes so far.
func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}
