package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/history"
)

// writer writes keys to a cluster without pause while a scenario runs, and
// remembers when etcd acknowledged each. A scenario may make writes fail;
// it must never lose one that succeeded, and writes must succeed again after
// the disruption (and during it, where quorum holds). The writer reports the
// longest stall: the longest time without an acknowledged write.
//
// The writer's goroutine never touches the test: it only records, and the
// test reads what it recorded.
type writer struct {
	t       *testing.T
	ns      string
	cluster string
	// space is what the writer's keys are under: the cluster's name, or
	// another for a second writer of the same cluster.
	space string

	mu      sync.Mutex
	acked   map[string]string
	ackedAt []time.Time
	failed  int
	lastErr error
	// failures are the writes that failed, when they were called and why
	// (the first hundred).
	failures []failure
	marks    map[string]time.Time
	stop     chan struct{}
	done     chan struct{}
	start    time.Time

	// hist records every put of the writer and every read of its reader,
	// for the linearizability check; lastSeq is the writer's last key.
	hist    history.Recorder
	lastSeq atomic.Int64
	reads   atomic.Int64
}

func startWriter(t *testing.T, ns, cluster string) *writer {
	t.Helper()
	return startWriterIn(t, ns, cluster, cluster)
}

// startWriterIn starts a writer whose keys are under space, apart from
// every other writer's.
func startWriterIn(t *testing.T, ns, cluster, space string) *writer {
	t.Helper()
	w := &writer{t: t, ns: ns, cluster: cluster, space: space, acked: map[string]string{}, marks: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	w.lastSeq.Store(-1)
	readerDone := make(chan struct{})
	go w.run(w.done, w.put)
	go w.run(readerDone, w.read)
	w.done = mergeDone(w.done, readerDone)
	t.Cleanup(w.halt)
	return w
}

// mergeDone is closed once both are.
func mergeDone(a, b chan struct{}) chan struct{} {
	out := make(chan struct{})
	go func() {
		<-a
		<-b
		close(out)
	}()
	return out
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// run calls op every 50 ms with a client of the cluster's current Pods.
func (w *writer) run(done chan struct{}, op func(*clientv3.Client, int) bool) {
	defer close(done)
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
		if c != nil && op(c, seq) {
			// Logged in with a password that changed: dial again with
			// the current one, as a client would.
			_ = c.Close()
			c = nil
		}
	}
}

// reconnect points the client at the cluster's current Pods.
func (w *writer) reconnect(c *clientv3.Client) *clientv3.Client {
	eps, err := podEndpoints(w.ns, w.cluster)
	if err != nil || len(eps) == 0 {
		return c
	}
	if c != nil {
		c.SetEndpoints(eps...)
		return c
	}
	nc, err := dialCluster(w.ns, w.cluster, eps)
	if err != nil {
		return nil
	}
	return nc
}

// put writes one key and reports whether the client's credentials were
// refused.
func (w *writer) put(c *clientv3.Client, seq int) (refused bool) {
	key, value := fmt.Sprintf("e2e/%s/%08d", w.space, seq), fmt.Sprintf("v%d-%d", seq, time.Now().UnixNano())
	if seq%4 == 3 {
		// A key written over and over: its reads check the order of
		// writes, not only their presence.
		key = registerKey(w.space)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	call := time.Now()
	_, err := c.Put(ctx, key, value)
	w.hist.Record(history.Op{Client: 0, Kind: history.Put, Key: key, Value: value, Call: call, Return: time.Now(), Err: err})
	w.lastSeq.Store(int64(seq))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// The register's writes fail like any other: they count, and are
		// listed, too (a stall with no failed write listed would hide one).
		w.failed++
		w.lastErr = err
		if len(w.failures) < 100 {
			w.failures = append(w.failures, failure{call: call, took: time.Since(call), err: err.Error()})
		}
		return errors.Is(etcd.Classify(err), etcd.ErrAuthFailed)
	}
	w.ackedAt = append(w.ackedAt, time.Now())
	if key != registerKey(w.space) {
		// The register is overwritten: its writes are checked by the
		// history's reads, not by their presence.
		w.acked[key] = value
	}
	return false
}

// registerKey is the key the writer writes over and over.
func registerKey(cluster string) string { return "e2e-register/" + cluster }

// read reads, linearizably, the register or a key the writer wrote (or is
// writing) lately, and records what it saw.
func (w *writer) read(c *clientv3.Client, seq int) bool {
	last := w.lastSeq.Load()
	if last < 0 {
		return false
	}
	key := registerKey(w.space)
	if seq%2 == 0 {
		key = fmt.Sprintf("e2e/%s/%08d", w.space, max(0, last-int64(seq%3)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	call := time.Now()
	resp, err := c.Get(ctx, key)
	op := history.Op{Client: 1, Kind: history.Get, Key: key, Call: call, Return: time.Now(), Err: err}
	if err == nil && len(resp.Kvs) > 0 {
		op.Found, op.Value = true, string(resp.Kvs[0].Value)
	}
	w.hist.Record(op)
	if err == nil {
		w.reads.Add(1)
	}
	return err != nil && errors.Is(etcd.Classify(err), etcd.ErrAuthFailed)
}

// checkLinearizable checks the history of the writer and its reader; a
// violation fails the test and leaves a visualisation under bin/histories.
func (w *writer) checkLinearizable() {
	w.t.Helper()
	ops := w.hist.Ops()
	file, _ := filepath.Abs(filepath.Join("..", "..", "bin", "histories", strings.NewReplacer("/", "_", " ", "_").Replace(w.t.Name())+"-"+w.space+".html"))
	_ = os.MkdirAll(filepath.Dir(file), 0o755)
	v, err := history.Check(ops, time.Minute, file)
	switch {
	case err != nil:
		w.t.Errorf("checking the history: %v", err)
	case v.Timeout:
		w.t.Logf("history: %s; visualisation in %s", v, file)
	case !v.Linearizable:
		w.t.Errorf("the clients' history is not linearizable (%s); visualisation in %s", v, file)
	default:
		w.t.Logf("history: %s (%d reads)", v, w.reads.Load())
	}
}

// mark remembers the moment a phase of the scenario begins ("disrupted",
// "recovered", ...).
func (w *writer) mark(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks[name] = time.Now()
}

// ackedBetween counts the writes acknowledged between two marks ("" is the
// start of the writer, or now).
func (w *writer) ackedBetween(from, to string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo, hi := w.markTime(from, w.start), w.markTime(to, time.Now())
	n := 0
	for _, at := range w.ackedAt {
		if !at.Before(lo) && at.Before(hi) {
			n++
		}
	}
	return n
}

// firstAckAfter is when the first write after the mark was acknowledged
// (zero if none was).
func (w *writer) firstAckAfter(mark string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo := w.markTime(mark, w.start)
	for _, at := range w.ackedAt {
		if !at.Before(lo) {
			return at
		}
	}
	return time.Time{}
}

func (w *writer) markTime(name string, otherwise time.Time) time.Time {
	if at, ok := w.marks[name]; ok {
		return at
	}
	return otherwise
}

// requireWritesAfter waits until at least n writes were acknowledged after
// the mark: the cluster serves writes again.
func (w *writer) requireWritesAfter(mark string, n int, timeout time.Duration) {
	w.t.Helper()
	eventually(w.t, timeout, fmt.Sprintf("%d acknowledged writes after %q", n, mark), func() (bool, string) {
		got := w.ackedBetween(mark, "")
		w.mu.Lock()
		last := w.lastErr
		w.mu.Unlock()
		return got >= n, fmt.Sprintf("%d so far; last error: %v", got, last)
	})
}

// requireWritesBetween checks that writes were acknowledged while a
// disruption lasted, for scenarios where quorum holds throughout.
func (w *writer) requireWritesBetween(from, to string, n int) {
	w.t.Helper()
	if got := w.ackedBetween(from, to); got < n {
		w.t.Errorf("only %d writes were acknowledged between %q and %q, want %d: quorum held, writes should go on", got, from, to, n)
	}
}

// failure is a write that failed.
type failure struct {
	call time.Time
	took time.Duration
	err  string
}

// longestStall is the longest time without an acknowledged write between
// two marks ("" is the start of the writer, or now).
func (w *writer) longestStall(from, to string) time.Duration {
	_, d := w.longestStallAt(from, to)
	return d
}

// longestStallAt is longestStall with when that stall began.
func (w *writer) longestStallAt(from, to string) (time.Time, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo, hi := w.markTime(from, w.start), w.markTime(to, time.Now())
	prev, began, longest := lo, lo, time.Duration(0)
	for _, at := range w.ackedAt {
		if at.Before(lo) || !at.Before(hi) {
			continue
		}
		if at.Sub(prev) > longest {
			began, longest = prev, at.Sub(prev)
		}
		prev = at
	}
	if hi.Sub(prev) > longest {
		began, longest = prev, hi.Sub(prev)
	}
	return began, longest
}

// verify stops the writer, checks that every acknowledged write is in the
// cluster now and that writes were acknowledged after the mark (the end of
// the disruption; "" when the scenario has none), and reports the longest
// stall.
func (w *writer) verify(after string) {
	w.t.Helper()
	if after != "" {
		w.requireWritesAfter(after, 10, 2*time.Minute)
	}
	w.halt()
	stall := w.longestStall("", "")
	w.mu.Lock()
	acked, failed, lastErr := maps.Clone(w.acked), w.failed, w.lastErr
	w.mu.Unlock()
	if len(acked) == 0 {
		w.t.Fatalf("no write was acknowledged (%d failed, last error %v)", failed, lastErr)
	}
	have := w.readBack()
	lost := 0
	for key, value := range acked {
		if have[key] != value {
			lost++
			if lost <= 5 {
				w.t.Errorf("acknowledged write lost: %s=%s (have %q)", key, value, have[key])
			}
		}
	}
	if lost > 0 {
		w.t.Errorf("%d of %d acknowledged writes lost", lost, len(acked))
	}
	present := "all present"
	if lost > 0 {
		present = fmt.Sprintf("%d present", len(acked)-lost)
	}
	w.t.Logf("writer: %d writes acknowledged and %s, %d failed; longest stall %s", len(acked), present, failed, stall.Round(time.Millisecond))
	w.checkLinearizable()
}

// readBack reads every key the writer wrote.
func (w *writer) readBack() map[string]string {
	w.t.Helper()
	var resp *clientv3.GetResponse
	eventually(w.t, time.Minute, "reading back the writes", func() (bool, string) {
		c, err := clusterClient(w.ns, w.cluster)
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err = c.Get(ctx, "e2e/"+w.space+"/", clientv3.WithPrefix())
		return err == nil, fmt.Sprint(err)
	})
	have := map[string]string{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	return have
}

// count is the number of acknowledged writes so far.
func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// clientTLS holds the client TLS configuration of clusters that use TLS,
// by namespace/name; the suites of such clusters register it.
var clientTLS sync.Map

// podSelectors holds, by namespace/name, the labels to find a cluster's
// Pods by when they are not the operator's own (a legacy cluster's Pods lack
// its cluster label until they are adopted).
var podSelectors sync.Map

// clientPassword holds the root password (an *atomic.Pointer[string]) of
// clusters with authentication, by namespace/name.
var clientPassword sync.Map

// clusterPods lists the cluster's Pods without a test handle, for the
// writer's goroutine.
func clusterPods(ns, cluster string) (map[string]corev1.Pod, error) {
	list := &corev1.PodList{}
	selector := client.MatchingLabels{manifest.LabelCluster: cluster}
	if v, ok := podSelectors.Load(ns + "/" + cluster); ok {
		selector = v.(client.MatchingLabels)
	}
	if err := k.List(context.Background(), list, client.InNamespace(ns), selector); err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out, nil
}

// podEndpoints are the client URLs of the cluster's running Pods, by their
// DNS names (TLS verifies those); dialCluster dials them at the Pods' IPs,
// as the test runs on the host, outside cluster DNS.
func podEndpoints(ns, cluster string) ([]string, error) {
	scheme := "http"
	if _, ok := clientTLS.Load(ns + "/" + cluster); ok {
		scheme = "https"
	}
	pods, err := clusterPods(ns, cluster)
	if err != nil {
		return nil, err
	}
	// With authentication only voters: logging in is a raft request that
	// a learner refuses (the client Service selects voters for the same
	// reason).
	_, auth := clientPassword.Load(ns + "/" + cluster)
	var out []string
	for _, p := range pods {
		if auth && p.Labels[manifest.LabelRole] != manifest.RoleVoter {
			continue
		}
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out = append(out, fmt.Sprintf("%s://%s.%s.%s.svc:2379", scheme, p.Name, cluster, ns))
		}
	}
	return out, nil
}

// podAddress maps a member's DNS name to its Pod's IP, looked up at dial time.
func podAddress(ns, cluster string) func(string) (string, bool) {
	return func(host string) (string, bool) {
		name, _, _ := strings.Cut(host, ".")
		pods, err := clusterPods(ns, cluster)
		if err != nil {
			return "", false
		}
		p, ok := pods[name]
		return p.Status.PodIP, ok && p.Status.PodIP != ""
	}
}

// clusterClient connects to the cluster's Pods, with its TLS if it has one.
func clusterClient(ns, cluster string) (*clientv3.Client, error) {
	eps, err := podEndpoints(ns, cluster)
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no pods")
	}
	return dialCluster(ns, cluster, eps)
}

func dialCluster(ns, cluster string, eps []string) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(etcd.ResolvingDialer(podAddress(ns, cluster)))}}
	if v, ok := clientTLS.Load(ns + "/" + cluster); ok {
		cfg.TLS = v.(*tls.Config)
	}
	if v, ok := clientPassword.Load(ns + "/" + cluster); ok {
		cfg.Username, cfg.Password = "root", *v.(*atomic.Pointer[string]).Load()
	}
	return clientv3.New(cfg)
}

// etcdMemberList asks the cluster for its membership.
func etcdMemberList(ns, cluster string) ([]*etcdserverpb.Member, error) {
	c, err := clusterClient(ns, cluster)
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
