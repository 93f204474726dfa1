//go:build bench

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// floors is what the sandbox's nodes allow, measured in the same run as
// the scenarios, with no operator: etcd Pods the bench makes and drives by
// hand, on the same nodes, with the same image and readiness probe as the
// operator's members.
type floors struct {
	// pod: a bare etcd Pod (a cluster of one), created → Ready; the
	// mean of singleRuns.
	pod float64
	// static: N such Pods started at once as one cluster → all Ready and N
	// voters. No membership change: what the nodes allow at all.
	static map[int]float64
	// grow: a cluster grown by hand the operator's way: a seed Pod, then
	// for each further member a learner added through etcd, its Pod, and
	// its promotion once etcd takes it (etcd refuses a membership change
	// until every voter has been connected for about 5 s). grow[N] is the
	// time until etcd lists N started voters and each serves its clients
	// (waitServing), as the static floor and the operator's scenarios
	// require. (A learner that caught up from the leader's snapshot serves
	// only once etcd retried its publish after the request timeout; the
	// next join does not wait for that.)
	grow map[int]float64
	// repair: on a settled 3-member cluster, a member removed through etcd
	// and its Pod deleted, then a new learner added, its Pod Ready,
	// promoted, and serving its clients. grow, shrink and repair are
	// measured on one cluster with a client writing throughout, as every
	// scenario has.
	repair float64
	// shrink: on a settled 5-member cluster, two members removed through
	// etcd and their Pods deleted, until the Pods are gone.
	shrink float64
}

// measureFloors measures the floors; the Pods and Services it made are
// deleted before it returns.
func measureFloors(t *testing.T, ns string) floors {
	f := floors{static: map[int]float64{}, grow: map[int]float64{}}
	var pods []string
	var sum float64
	for i := range singleRuns {
		c := newFloorCluster(t, ns, fmt.Sprintf("floor-pod%d", i))
		start := time.Now()
		c.startPods(t, 1, "new")
		c.waitReady(t, 1)
		took := c.seen.Sub(start).Seconds()
		sum += took
		pods = append(pods, fmt.Sprintf("%.2f", took))
		c.delete(t)
	}
	f.pod = sum / singleRuns
	fmt.Printf("floor: bare etcd Pods created → Ready: %s s\n", strings.Join(pods, ", "))
	for _, n := range []int{3, 5} {
		c := newFloorCluster(t, ns, fmt.Sprintf("floor-static%d", n))
		start := time.Now()
		c.startPods(t, n, "new")
		c.waitReady(t, n)
		c.waitVoters(t, n)
		c.waitServing(t)
		f.static[n] = c.seen.Sub(start).Seconds()
		c.delete(t)
	}
	c := newFloorCluster(t, ns, "floor-grow")
	start := time.Now()
	c.startPods(t, 1, "new")
	// The scenarios all keep a client writing; so does the cluster the
	// floors of their membership changes are measured on: the same writer,
	// finding the floor's Pods by their label.
	podSelectors.Store(ns+"/"+c.name, client.MatchingLabels{"floor": c.name})
	fw := startWriter(t, ns, c.name)
	c.waitReady(t, 1)
	f.grow[1] = c.seen.Sub(start).Seconds()
	for n := 2; n <= 5; n++ {
		c.join(t)
		if n == 3 || n == 5 {
			c.waitVoters(t, n)
			c.waitServing(t)
			f.grow[n] = c.seen.Sub(start).Seconds()
		}
	}
	start = time.Now()
	c.remove(t, 2)
	f.shrink = c.seen.Sub(start).Seconds()
	// Settled: every voter connected for longer than etcd's 5 s.
	measureFor(6 * time.Second)
	start = time.Now()
	c.remove(t, 1)
	c.join(t)
	c.waitVoters(t, 3)
	c.waitServing(t)
	f.repair = c.seen.Sub(start).Seconds()
	fw.verify("")
	c.delete(t)
	return f
}

// floorRows reports the floors themselves.
func (f floors) rows() []result {
	return []result{
		row(fmt.Sprintf("floor: a bare etcd Pod created → Ready (mean of %d)", singleRuns), f.pod, "s", "(measured)", 0),
		row("floor: 3 etcd Pods started at once → 3 voters Ready", f.static[3], "s", "(measured)", 0),
		row("floor: 5 etcd Pods started at once → 5 voters Ready", f.static[5], "s", "(measured)", 0),
		row("floor: 3 members by hand, learner joins (seed, add, Pod, promote), all serving", f.grow[3], "s", "(measured)", 0),
		row("floor: 5 members by hand, learner joins", f.grow[5], "s", "(measured)", 0),
		row("floor: 3 → 5 by hand", f.grow[5]-f.grow[3], "s", "(measured)", 0),
		row("floor: 5 → 3 by hand (2 removed through etcd, Pods gone)", f.shrink, "s", "(measured)", 0),
		row("floor: 1 of 3 replaced by hand (remove, add, Pod, promote, serving)", f.repair, "s", "(measured)", 0),
	}
}

// floorCluster is an etcd cluster of plain Pods behind a headless Service,
// with no operator.
type floorCluster struct {
	ns, name string
	next     int
	// members are the Pod names etcd lists, in the order they joined.
	members []string
	// seen is when the last wait's look that found what it waited for
	// began (until).
	seen time.Time
}

func newFloorCluster(t *testing.T, ns, name string) *floorCluster {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"floor": name},
			Ports:    []corev1.ServicePort{{Name: "peer", Port: 2380}, {Name: "client", Port: 2379}}},
	}
	if err := k.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	return &floorCluster{ns: ns, name: name}
}

func (c *floorCluster) host(pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, c.name, c.ns)
}

// startPods creates n member Pods at once, bootstrapping a cluster of
// them ("new") or joining the members etcd already lists ("existing").
func (c *floorCluster) startPods(t *testing.T, n int, state string) {
	t.Helper()
	var names []string
	for range n {
		names = append(names, fmt.Sprintf("%s-%d", c.name, c.next))
		c.next++
	}
	var initial []string
	for _, m := range slices.Concat(c.members, names) {
		initial = append(initial, fmt.Sprintf("%s=http://%s:2380", m, c.host(m)))
	}
	for _, m := range names {
		if err := k.Create(context.Background(), c.pod(m, strings.Join(initial, ","), state)); err != nil {
			t.Fatal(err)
		}
	}
	c.members = append(c.members, names...)
}

func (c *floorCluster) pod(name, initial, state string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: map[string]string{"floor": c.name}},
		Spec: corev1.PodSpec{
			Hostname: name, Subdomain: c.name, TerminationGracePeriodSeconds: ptrInt64(5),
			Containers: []corev1.Container{{
				Name: "etcd", Image: manifest.EtcdImage("", etcdVersion),
				Command: []string{"etcd", "--name=" + name, "--data-dir=/var/lib/etcd/data",
					"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
					"--listen-metrics-urls=http://0.0.0.0:2381",
					"--advertise-client-urls=http://" + c.host(name) + ":2379",
					"--initial-advertise-peer-urls=http://" + c.host(name) + ":2380",
					"--initial-cluster=" + initial, "--initial-cluster-state=" + state},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: manifest.ReadinessPath, Port: intstr.FromInt32(manifest.MetricsPort)}},
					PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 3,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func ptrInt64(v int64) *int64 { return &v }

// pollFloor is how often the floors look, and the scenarios for what they
// time (the rest of the e2e suites look every 250 ms).
const pollFloor = 100 * time.Millisecond

// waitReady waits until n of the cluster's Pods are Ready.
func (c *floorCluster) waitReady(t *testing.T, n int) {
	t.Helper()
	c.until(t, fmt.Sprintf("%d Pods of %s Ready", n, c.name), func() (bool, string) {
		list := &corev1.PodList{}
		if err := k.List(context.Background(), list, client.InNamespace(c.ns), client.MatchingLabels{"floor": c.name}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podIsReady(p.Status.Conditions) {
				ready++
			}
		}
		return ready >= n, fmt.Sprintf("%d ready", ready)
	})
}

// waitVoters waits until etcd lists n started voters.
func (c *floorCluster) waitVoters(t *testing.T, n int) {
	t.Helper()
	c.until(t, fmt.Sprintf("%d voters in %s", n, c.name), func() (bool, string) {
		list, err := c.call(func(ctx context.Context, cl *clientv3.Client) (any, error) { return cl.MemberList(ctx) })
		if err != nil {
			return false, err.Error()
		}
		voters := 0
		for _, m := range list.(*clientv3.MemberListResponse).Members {
			if !m.IsLearner && m.Name != "" {
				voters++
			}
		}
		return voters == n, fmt.Sprintf("%d voters", voters)
	})
}

// waitServing waits until every member answers a Status call on its own
// client URL: etcd serves a member's clients only once the member knows it
// has published itself, which a learner that caught up from the leader's
// snapshot learns only when it retries after its request timeout (etcd's
// leader may list it by name before that). The operator's scenarios end
// there too: readyMembers counts the members that serve.
func (c *floorCluster) waitServing(t *testing.T) {
	t.Helper()
	for _, m := range c.members {
		c.until(t, m+" serving its clients", func() (bool, string) {
			p := &corev1.Pod{}
			if err := k.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: m}, p); err != nil || p.Status.PodIP == "" {
				return false, fmt.Sprint("no Pod address: ", err)
			}
			ep := "http://" + p.Status.PodIP + ":2379"
			cl, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				return false, err.Error()
			}
			defer func() { _ = cl.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = cl.Status(ctx, ep)
			return err == nil, fmt.Sprint(err)
		})
	}
}

// join grows the cluster by one member the operator's way: a learner added
// through etcd (retried while etcd refuses it), its Pod, its promotion
// (retried until etcd takes it: the learner has caught up).
func (c *floorCluster) join(t *testing.T) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", c.name, c.next)
	var id uint64
	began := time.Now()
	var refusals []string
	defer func() {
		t.Logf("floor %s: %s joined in %.2f s (etcd refused %d times: %s)", c.name, name, time.Since(began).Seconds(), len(refusals), summarize(refusals))
	}()
	c.until(t, "learner "+name+" added", func() (bool, string) {
		resp, err := c.call(func(ctx context.Context, cl *clientv3.Client) (any, error) {
			return cl.MemberAddAsLearner(ctx, []string{"http://" + c.host(name) + ":2380"})
		})
		if err != nil {
			refusals = append(refusals, fmt.Sprintf("add at %.1f s: %v", time.Since(began).Seconds(), err))
			return false, err.Error()
		}
		id = resp.(*clientv3.MemberAddResponse).Member.ID
		return true, ""
	})
	added := time.Since(began).Seconds()
	c.startPods(t, 1, "existing")
	c.waitReady(t, len(c.members))
	ready := time.Since(began).Seconds()
	defer func() { t.Logf("floor %s: %s added at %.2f s, Ready at %.2f s", c.name, name, added, ready) }()
	c.until(t, "learner "+name+" promoted", func() (bool, string) {
		_, err := c.call(func(ctx context.Context, cl *clientv3.Client) (any, error) { return cl.MemberPromote(ctx, id) })
		if err != nil {
			refusals = append(refusals, fmt.Sprintf("promote at %.1f s: %v", time.Since(began).Seconds(), err))
			return false, err.Error()
		}
		return true, ""
	})
}

// remove takes n members out through etcd, the newest first, and deletes
// their Pods, until they are gone.
func (c *floorCluster) remove(t *testing.T, n int) {
	t.Helper()
	for range n {
		name := c.members[len(c.members)-1]
		c.until(t, name+" removed from etcd", func() (bool, string) {
			list, err := c.call(func(ctx context.Context, cl *clientv3.Client) (any, error) { return cl.MemberList(ctx) })
			if err != nil {
				return false, err.Error()
			}
			for _, m := range list.(*clientv3.MemberListResponse).Members {
				if m.Name == name {
					if _, err := c.call(func(ctx context.Context, cl *clientv3.Client) (any, error) { return cl.MemberRemove(ctx, m.ID) }); err != nil {
						return false, err.Error()
					}
				}
			}
			return true, ""
		})
		c.members = c.members[:len(c.members)-1]
		if err := k.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns}}); err != nil {
			t.Fatal(err)
		}
		c.until(t, "pod "+name+" gone", func() (bool, string) {
			err := k.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, &corev1.Pod{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
}

// call runs one etcd request against the members' Pods.
func (c *floorCluster) call(f func(context.Context, *clientv3.Client) (any, error)) (any, error) {
	var eps []string
	for _, m := range c.members {
		p := &corev1.Pod{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: m}, p); err == nil && p.Status.PodIP != "" && podIsReady(p.Status.Conditions) {
			eps = append(eps, "http://"+p.Status.PodIP+":2379")
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no member Ready")
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cl.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return f(ctx, cl)
}

// until waits for cond, looking as often as the scenarios do; seen is
// when its look that found cond true began, as the scenarios' ends are.
func (c *floorCluster) until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	c.seen = eventuallyEvery(t, pollFloor, 3*time.Minute, "floor: "+what, cond)
}

// delete removes the cluster's Pods and Service and waits for the Pods to
// go.
func (c *floorCluster) delete(t *testing.T) {
	t.Helper()
	if err := k.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(c.ns), client.MatchingLabels{"floor": c.name}); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.ns}}); err != nil {
		t.Fatal(err)
	}
	c.until(t, "pods of "+c.name+" gone", func() (bool, string) {
		list := &corev1.PodList{}
		if err := k.List(context.Background(), list, client.InNamespace(c.ns), client.MatchingLabels{"floor": c.name}); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
}

// summarize folds repeated refusals: the first and the last of each kind.
func summarize(refusals []string) string {
	if len(refusals) == 0 {
		return "none"
	}
	var out []string
	for i, r := range refusals {
		if i == 0 || i == len(refusals)-1 || kindOf(r) != kindOf(refusals[i-1]) || kindOf(r) != kindOf(refusals[i+1]) {
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}

func kindOf(refusal string) string {
	verb, _, _ := strings.Cut(refusal, " ")
	_, err, _ := strings.Cut(refusal, ": ")
	return verb + err
}
