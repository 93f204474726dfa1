package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestClientServiceServesVotersOnly scales 3 → 5 → 3 while a client talks to
// the cluster through its client Service only, over a new connection for
// every write (so every write is routed afresh): no write ever meets a
// learner. In the background the Service's endpoints are compared with
// etcd's membership: no endpoint is ever a learner.
func TestClientServiceServesVotersOnly(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-clientservice")
	const name = "routed"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	svc := &corev1.Service{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.ClientServiceName(name)}, svc); err != nil {
		t.Fatal(err)
	}
	through := net.JoinHostPort(svc.Spec.ClusterIP, "2379")
	sc := startServiceClient(through)
	t.Cleanup(sc.halt)
	var seenLearner atomic.Value
	stopWatch := every(200*time.Millisecond, func() {
		if bad := learnerEndpoint(ns, name); bad != "" {
			seenLearner.Store(bad)
		}
	})
	eventually(t, time.Minute, "writes through the client Service", func() (bool, string) {
		ok, _, last := sc.counts()
		return ok > 10, fmt.Sprint(last)
	})
	for _, n := range []int32{5, 3} {
		setReplicas(t, ns, name, n)
		waitReconciled(t, ns, name, int(n), 3*time.Minute)
	}
	stopWatch()
	sc.halt()
	ok, learner, last := sc.counts()
	if learner > 0 {
		t.Errorf("%d writes through the client Service met a learner (last error: %v)", learner, last)
	}
	if bad, _ := seenLearner.Load().(string); bad != "" {
		t.Errorf("the client Service routed to a learner: %s", bad)
	}
	t.Logf("%d writes through the client Service, none met a learner", ok)
}

// serviceClient writes through one address, one connection per write.
type serviceClient struct {
	addr    string
	mu      sync.Mutex
	ok      int
	learner int
	last    error
	stop    chan struct{}
	done    chan struct{}
}

func startServiceClient(addr string) *serviceClient {
	c := &serviceClient{addr: addr, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *serviceClient) run() {
	defer close(c.done)
	for seq := 0; ; seq++ {
		select {
		case <-c.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		err := c.put(seq)
		c.mu.Lock()
		switch {
		case err == nil:
			c.ok++
		case strings.Contains(err.Error(), "learner"):
			c.learner++
			c.last = err
		default:
			c.last = err
		}
		c.mu.Unlock()
	}
}

func (c *serviceClient) put(seq int) error {
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{c.addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cl.Put(ctx, fmt.Sprintf("svc/%08d", seq), "v")
	return err
}

func (c *serviceClient) counts() (ok, learner int, last error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.learner, c.last
}

func (c *serviceClient) halt() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// learnerEndpoint returns a ready endpoint of the client Service that etcd
// lists as a learner, read endpoints first: a Pod only becomes an endpoint
// after its promotion, so a learner seen afterwards was routed to.
func learnerEndpoint(ns, name string) string {
	slices := &discoveryv1.EndpointSliceList{}
	if err := k.List(context.Background(), slices, client.InNamespace(ns),
		client.MatchingLabels{discoveryv1.LabelServiceName: manifest.ClientServiceName(name)}); err != nil {
		return ""
	}
	pods, err := clusterPods(ns, name)
	if err != nil {
		return ""
	}
	byIP := map[string]string{}
	for _, p := range pods {
		byIP[p.Status.PodIP] = p.Name
	}
	var routed []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready && len(e.Addresses) > 0 {
				routed = append(routed, byIP[e.Addresses[0]])
			}
		}
	}
	list, err := etcdMemberList(ns, name)
	if err != nil {
		return ""
	}
	for _, m := range list {
		for _, r := range routed {
			if m.IsLearner && m.Name == r {
				return r
			}
		}
	}
	return ""
}
