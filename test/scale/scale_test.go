// Package scale is the fleet harness behind `make scale`: one operator, as
// shipped, in front of hundreds to thousands of three-member clusters whose
// members are hollow (fake etcd over etcd's own gRPC API, Pods run by a
// hollow kubelet), on a real kube-apiserver. It prints what the operator
// costs and how fast it acts at each fleet size, and writes
// bench/scale.json. Nothing here asserts a time: the figures are compared
// with DESIGN.md's targets by whoever reads them.
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// figures are one fleet size's results; the JSON keys are issue 42's.
type figures struct {
	Clusters                    int                `json:"clusters"`
	Members                     int                `json:"members"`
	RSSMiB                      float64            `json:"rss_mib"`
	HeapMiB                     float64            `json:"heap_mib"`
	CPUSecondsPerMinute         float64            `json:"cpu_seconds_per_minute"`
	APIRequestsPerSecondAtRest  map[string]float64 `json:"api_requests_per_second_at_rest"`
	APIWritesAtRest             float64            `json:"api_writes_at_rest"`
	EtcdCallsPerMemberPerMinute float64            `json:"etcd_calls_per_member_per_minute_at_rest"`
	CreateAllSeconds            float64            `json:"create_all_seconds"`
	ClustersPerMinute           float64            `json:"clusters_per_minute"`
	ActLatencyP50Seconds        float64            `json:"act_latency_p50_seconds"`
	ActLatencyP99Seconds        float64            `json:"act_latency_p99_seconds"`
	ActLatencyP99SickSeconds    float64            `json:"act_latency_p99_sick_seconds"`
	RestartToRestSeconds        float64            `json:"restart_to_rest_seconds"`
	WritesAfterRestart          float64            `json:"writes_after_restart"`
	RestWindowSeconds           float64            `json:"rest_window_seconds"`
}

// fleetSizes are the sizes to measure, grown one after the other in one
// API server (SCALE_FLEETS, default 100,300,1000).
func fleetSizes(t *testing.T) []int {
	spec := os.Getenv("SCALE_FLEETS")
	if spec == "" {
		spec = "100,300,1000"
	}
	var out []int
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			t.Fatalf("SCALE_FLEETS=%q: %q is not a fleet size", spec, s)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// restWindow is how long the fleet is watched at rest (SCALE_REST, 60s).
func restWindow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SCALE_REST")); err == nil && d > 0 {
		return d
	}
	return time.Minute
}

const namespaces = 10

func TestScale(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := startEnv(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(e.cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(e.cfg)
	k := newHollowKubelet(kube, c)
	if err := k.run(ctx, 8); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.close)
	w := newWatcher(ctx, t, e, scheme)
	for i := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildOperator(t, e.dir)
	op := e.startOperator(t, bin, 0)
	var results []figures
	have := 0
	for run, size := range fleetSizes(t) {
		f := figures{Clusters: size, Members: 3 * size}
		f.CreateAllSeconds = createFleet(ctx, t, c, have, size)
		f.ClustersPerMinute = float64(size-have) / f.CreateAllSeconds * 60
		have = size
		settle(ctx, t, op)
		atRest(ctx, t, op, k, &f)
		f.ActLatencyP50Seconds, f.ActLatencyP99Seconds = actLatencies(ctx, t, c, kube, w, size, nil)
		sick := sicken(k, size)
		waitSickAsked(ctx, t, k, sick)
		_, f.ActLatencyP99SickSeconds = actLatencies(ctx, t, c, kube, w, size, sick)
		heal(k, sick)
		waitAvailable(ctx, t, c, size)
		settle(ctx, t, op)
		op.kill()
		op = e.startOperator(t, bin, run+1)
		f.RestartToRestSeconds, f.WritesAfterRestart = restart(ctx, t, op, size)
		results = append(results, f)
		report(t, results)
	}
}

func nsName(i int) string { return fmt.Sprintf("fleet-%d", i) }

func clusterKey(i int) client.ObjectKey {
	return client.ObjectKey{Namespace: nsName(i % namespaces), Name: fmt.Sprintf("c%04d", i)}
}

// createFleet creates clusters from..to-1 and waits until every one is
// Available; it returns how long that took.
func createFleet(ctx context.Context, t *testing.T, c client.Client, from, to int) float64 {
	t.Helper()
	start := time.Now()
	for i := from; i < to; i++ {
		key := clusterKey(i)
		ec := &v1alpha2.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: v1alpha2.EtcdClusterSpec{Replicas: ptr.To[int32](3), Version: "3.6.16",
				Storage: v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resourceQuantity("256Mi")}},
		}
		if err := c.Create(ctx, ec); err != nil {
			t.Fatalf("creating %s: %v", key, err)
		}
	}
	waitAvailable(ctx, t, c, to)
	took := time.Since(start).Seconds()
	// Available says the members serve; every cluster's Services must be
	// there too, or the operator retries them at every pass and the
	// figures at rest are not a fleet at rest.
	waitFor(ctx, t, "every cluster's client Service", 2*time.Minute, 5*time.Second, func() (bool, string) {
		list := &corev1.ServiceList{}
		if err := c.List(ctx, list); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, svc := range list.Items {
			if strings.HasSuffix(svc.Name, "-client") {
				n++
			}
		}
		return n == to, fmt.Sprintf("%d of %d client Services", n, to)
	})
	return took
}

func waitAvailable(ctx context.Context, t *testing.T, c client.Client, n int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%d clusters Available", n), time.Duration(n)*6*time.Second+5*time.Minute, 5*time.Second, func() (bool, string) {
		list := &v1alpha2.EtcdClusterList{}
		if err := c.List(ctx, list); err != nil {
			return false, err.Error()
		}
		ready, notYet := 0, ""
		for i := range list.Items {
			if conditions.IsTrue(list.Items[i].Status.Conditions, conditions.Available) && list.Items[i].Status.ReadyMembers == *list.Items[i].Spec.Replicas {
				ready++
			} else if notYet == "" {
				notYet = list.Items[i].Namespace + "/" + list.Items[i].Name
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Available (%s is not)", ready, n, notYet)
	})
}

// writes sums the operator's write requests to the API server so far.
func writes(m map[string]*dto) float64 {
	total := 0.0
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		total += m["rest_client_requests_total"].sum(map[string]string{"method": verb})
	}
	return total
}

func scrape(t *testing.T, op *operator) map[string]*dto {
	t.Helper()
	m, err := op.scrape()
	if err != nil {
		t.Fatalf("scraping the operator: %v", err)
	}
	return m
}

// settle waits until the operator made no write for 20 s in a row.
func settle(ctx context.Context, t *testing.T, op *operator) {
	t.Helper()
	last, since := -1.0, time.Now()
	waitFor(ctx, t, "the operator at rest", 15*time.Minute, 2*time.Second, func() (bool, string) {
		n := writes(scrape(t, op))
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 20*time.Second, fmt.Sprintf("%.0f writes so far, the last %s ago", n, time.Since(since).Round(time.Second))
	})
}

// atRest watches the fleet for the rest window: requests by verb, writes,
// CPU, memory, and the etcd calls the members answered.
func atRest(ctx context.Context, t *testing.T, op *operator, k *hollowKubelet, f *figures) {
	t.Helper()
	before := scrape(t, op)
	_, cpu0, err := op.proc()
	if err != nil {
		t.Fatal(err)
	}
	calls0, start := k.calls(), time.Now()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(restWindow()):
	}
	after := scrape(t, op)
	rss, cpu1, err := op.proc()
	if err != nil {
		t.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	f.RestWindowSeconds = secs
	f.RSSMiB = rss
	f.HeapMiB = after["go_memstats_heap_inuse_bytes"].sum(nil) / (1 << 20)
	f.CPUSecondsPerMinute = (cpu1 - cpu0) / secs * 60
	f.APIRequestsPerSecondAtRest = map[string]float64{}
	for _, verb := range []string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"} {
		d := after["rest_client_requests_total"].sum(map[string]string{"method": verb}) - before["rest_client_requests_total"].sum(map[string]string{"method": verb})
		if d > 0 {
			f.APIRequestsPerSecondAtRest[verb] = d / secs
		}
	}
	f.APIWritesAtRest = writes(after) - writes(before)
	f.EtcdCallsPerMemberPerMinute = float64(k.calls()-calls0) / float64(f.Members) / secs * 60
}

// restart waits until the new operator reconciled every cluster and member
// and its queues are empty; it returns the time that took and the writes
// it made meanwhile (and in 20 s after).
func restart(ctx context.Context, t *testing.T, op *operator, n int) (float64, float64) {
	t.Helper()
	waitFor(ctx, t, "the restarted operator back at rest", 20*time.Minute, time.Second, func() (bool, string) {
		m, err := op.scrape()
		if err != nil {
			return false, err.Error()
		}
		cl := m["controller_runtime_reconcile_total"].sum(map[string]string{"controller": "etcdcluster"})
		mem := m["controller_runtime_reconcile_total"].sum(map[string]string{"controller": "etcdmember"})
		depth := m["workqueue_depth"].sum(map[string]string{"name": "etcdcluster"}) + m["workqueue_depth"].sum(map[string]string{"name": "etcdmember"})
		return cl >= float64(n) && mem >= float64(3*n) && depth == 0, fmt.Sprintf("%.0f cluster and %.0f member reconciles, %.0f queued", cl, mem, depth)
	})
	took := time.Since(op.started).Seconds()
	time.Sleep(20 * time.Second)
	return took, writes(scrape(t, op))
}

// sicken cuts the client ports of every member of one cluster in ten: they
// still run and look healthy to their Pods' probes, but every etcd call
// the operator makes to them waits for its timeout.
func sicken(k *hollowKubelet, n int) map[client.ObjectKey]bool {
	sick := map[client.ObjectKey]bool{}
	for i := 0; i < n; i += 10 {
		j := i + 5
		if j >= n {
			j = i
		}
		key := clusterKey(j)
		sick[key] = true
		h := k.hollow(key.Namespace, key.Name)
		for _, m := range h.Cluster().Members() {
			h.Cluster().CutClients(m.PeerURLs[0], true)
		}
	}
	return sick
}

// waitSickAsked waits until the operator has called every sick cluster's
// members since they were cut (its health poll reaches each within 30 s),
// so the samples that follow are taken while those calls hold workers.
func waitSickAsked(ctx context.Context, t *testing.T, k *hollowKubelet, sick map[client.ObjectKey]bool) {
	t.Helper()
	before := map[client.ObjectKey]int64{}
	for key := range sick {
		before[key] = k.hollow(key.Namespace, key.Name).Calls()
	}
	waitFor(ctx, t, "the operator calling the sick clusters", 2*time.Minute, time.Second, func() (bool, string) {
		waiting := 0
		for key, n := range before {
			if k.hollow(key.Namespace, key.Name).Calls() == n {
				waiting++
			}
		}
		return waiting == 0, fmt.Sprintf("%d of %d sick clusters not called yet", waiting, len(before))
	})
}

func heal(k *hollowKubelet, sick map[client.ObjectKey]bool) {
	for key := range sick {
		h := k.hollow(key.Namespace, key.Name)
		for _, m := range h.Cluster().Members() {
			h.Cluster().CutClients(m.PeerURLs[0], false)
		}
	}
}

func (k *hollowKubelet) calls() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	total := int64(0)
	for _, h := range k.clusters {
		total += h.Calls()
	}
	return total
}

// actLatencies makes 50 changes to healthy clusters spread over the fleet
// (half scale 3 → 5, half lose a member's Pod), two seconds apart, and
// measures each from the change to the operator's first write for that
// cluster. Each sample takes a cluster of its own while the fleet has
// enough, without waiting for the earlier ones to be repaired (their
// repair is the background the later samples are taken against); then the
// scaled clusters go back to 3 and every sampled cluster is waited for.
func actLatencies(ctx context.Context, t *testing.T, c client.Client, kube kubernetes.Interface, w *watcher, n int,
	sick map[client.ObjectKey]bool) (float64, float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	order := rng.Perm(n)
	var took []float64
	var touched, scaled []client.ObjectKey
	for s := 0; len(took) < 50; s++ {
		key := clusterKey(order[s%n])
		if sick[key] {
			continue
		}
		if slices.Contains(touched, key) {
			// A small fleet: the cluster is used again once repaired.
			settleClusters(ctx, t, c, scaled, touched)
			touched, scaled = nil, nil
		}
		took = append(took, sampleOne(ctx, t, c, kube, w, key, s%2 == 0))
		touched = append(touched, key)
		if s%2 == 0 {
			scaled = append(scaled, key)
		}
		time.Sleep(2 * time.Second)
	}
	settleClusters(ctx, t, c, scaled, touched)
	sort.Float64s(took)
	return took[len(took)/2], took[(len(took)*99+99)/100-1]
}

// settleClusters scales the scaled clusters back to 3 and waits until
// every touched one is reconciled with 3 ready members.
func settleClusters(ctx context.Context, t *testing.T, c client.Client, scaled, touched []client.ObjectKey) {
	t.Helper()
	for _, key := range scaled {
		scaleTo(ctx, t, c, key, 3)
	}
	for _, key := range touched {
		waitClusterAvailable(ctx, t, c, key)
	}
}

func sampleOne(ctx context.Context, t *testing.T, c client.Client, kube kubernetes.Interface, w *watcher, key client.ObjectKey, scale bool) float64 {
	t.Helper()
	if scale {
		return w.measure(t, key, func() string { return scaleTo(ctx, t, c, key, 5) })
	}
	pods, err := kube.CoreV1().Pods(key.Namespace).List(ctx, metav1.ListOptions{LabelSelector: manifest.SelectorString(key.Name)})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of %s: %v", key, err)
	}
	victim := pods.Items[0].Name
	return w.measure(t, key, func() string {
		if err := kube.CoreV1().Pods(key.Namespace).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		return ""
	})
}

// scaleTo sets the cluster's replicas and returns the resource version of
// that write (its own watch event is not the operator's).
func scaleTo(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey, n int32) string {
	t.Helper()
	ec := &v1alpha2.EtcdCluster{}
	if err := c.Get(ctx, key, ec); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ec.DeepCopy())
	ec.Spec.Replicas = ptr.To(n)
	if err := c.Patch(ctx, ec, patch); err != nil {
		t.Fatal(err)
	}
	return ec.ResourceVersion
}

func waitClusterAvailable(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	waitFor(ctx, t, key.String()+" Available with 3 members", 10*time.Minute, time.Second, func() (bool, string) {
		ec := &v1alpha2.EtcdCluster{}
		if err := c.Get(ctx, key, ec); err != nil {
			return false, err.Error()
		}
		members := &v1alpha2.EtcdMemberList{}
		if err := c.List(ctx, members, client.InNamespace(key.Namespace), client.MatchingLabels(manifest.ClusterSelector(key.Name))); err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range members.Items {
			if members.Items[i].DeletionTimestamp == nil && conditions.IsTrue(members.Items[i].Status.Conditions, conditions.Ready) {
				ready++
			}
		}
		ok := conditions.IsTrue(ec.Status.Conditions, conditions.Available) && ec.Status.ReadyMembers == 3 && len(members.Items) == 3 &&
			ready == 3 && ec.Status.Observed != nil && ec.Status.Observed.Replicas == 3 &&
			hasReason(ec, conditions.Progressing, conditions.ReasonReconciled)
		return ok, fmt.Sprintf("ready %d, members %d (%d ready)", ec.Status.ReadyMembers, len(members.Items), ready)
	})
}

// watcher sees every change to the fleet's clusters, members and Pods, to
// time the operator's first write after a change.
type watcher struct {
	mu      sync.Mutex
	pending *pendingSample
}

type pendingSample struct {
	key     client.ObjectKey
	skipRV  string
	firstAt chan time.Time
}

func newWatcher(ctx context.Context, t *testing.T, e *env, scheme *runtime.Scheme) *watcher {
	t.Helper()
	ca, err := cache.New(e.cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{}
	for _, obj := range []client.Object{&v1alpha2.EtcdCluster{}, &v1alpha2.EtcdMember{}, &corev1.Pod{}} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		_, isPod := obj.(*corev1.Pod)
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { w.seen(o.(client.Object), "") },
			UpdateFunc: func(old, o any) {
				if !isPod && old.(client.Object).GetResourceVersion() != o.(client.Object).GetResourceVersion() {
					w.seen(o.(client.Object), "")
				}
			},
			DeleteFunc: func(o any) {
				if obj, ok := o.(client.Object); ok && !isPod {
					w.seen(obj, "")
				}
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("the watcher's cache did not sync")
	}
	return w
}

// seen records an event of the object (Pods: only their creation, the
// operator's; their status is the hollow kubelet's).
func (w *watcher) seen(o client.Object, _ string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	if p == nil || o.GetNamespace() != p.key.Namespace || o.GetResourceVersion() == p.skipRV {
		return
	}
	cluster := o.GetLabels()[manifest.LabelCluster]
	if ec, ok := o.(*v1alpha2.EtcdCluster); ok {
		cluster = ec.Name
	}
	if m, ok := o.(*v1alpha2.EtcdMember); ok {
		cluster = m.Spec.ClusterName
	}
	if cluster != p.key.Name {
		return
	}
	select {
	case p.firstAt <- now:
	default:
	}
}

// measure makes the change and waits for the first event the operator
// caused in the cluster.
func (w *watcher) measure(t *testing.T, key client.ObjectKey, change func() string) float64 {
	t.Helper()
	p := &pendingSample{key: key, firstAt: make(chan time.Time, 1)}
	w.mu.Lock()
	w.pending = p
	w.mu.Unlock()
	start := time.Now()
	rv := change()
	w.mu.Lock()
	p.skipRV = rv
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.pending = nil
		w.mu.Unlock()
	}()
	for {
		select {
		case at := <-p.firstAt:
			if at.Before(start) {
				continue
			}
			return at.Sub(start).Seconds()
		case <-time.After(2 * time.Minute):
			t.Fatalf("the operator did not act on %s within 2 minutes", key)
		}
	}
}

// report prints the table and writes bench/scale.json.
func report(t *testing.T, results []figures) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-9s %8s %8s %8s %10s %12s %10s %9s %9s %9s %9s %9s %9s\n", "clusters", "rss MiB", "heap MiB", "cpu s/m",
		"API req/s", "writes rest", "etcd c/m/m", "create s", "act p50", "act p99", "sick p99", "restart", "rst wr")
	for _, f := range results {
		reqs := 0.0
		for _, v := range f.APIRequestsPerSecondAtRest {
			reqs += v
		}
		fmt.Fprintf(&b, "%-9d %8.0f %8.0f %8.2f %10.2f %12.0f %10.2f %9.0f %9.2f %9.2f %9.2f %9.0f %9.0f\n", f.Clusters, f.RSSMiB, f.HeapMiB,
			f.CPUSecondsPerMinute, reqs, f.APIWritesAtRest, f.EtcdCallsPerMemberPerMinute, f.CreateAllSeconds, f.ActLatencyP50Seconds,
			f.ActLatencyP99Seconds, f.ActLatencyP99SickSeconds, f.RestartToRestSeconds, f.WritesAfterRestart)
	}
	t.Log(b.String())
	fmt.Print(b.String())
	out, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tools.RepoRoot(), "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func hasReason(ec *v1alpha2.EtcdCluster, typ, reason string) bool {
	c := conditions.Get(ec.Status.Conditions, typ)
	return c != nil && c.Reason == reason
}
