package e2e

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestPeerPartitionDuringRoll cuts only the peer traffic (port 2380) of one
// follower, with a writer running, then asks for a roll-out: the cut member
// turns unready within seconds and leaves the client Service, the operator
// restarts no connected member while it is cut (that would lose quorum),
// writes go on, and once healed the member comes back and the roll
// completes (issue 20, claim 1).
func TestPeerPartitionDuringRoll(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-peercut")
	const name = "peercut"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 10, time.Minute)
	cut, connected := followerAndOthers(t, ns, name)
	cutUID := string(pods(t, ns, name)[cut].UID)
	w.mark("cut")
	if err := sb.PartitionPorts(context.Background(), ns, cut, 2380); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = sb.Heal(context.Background(), ns, cut)
		}
	})
	eventually(t, 30*time.Second, cut+" unready and out of the client Service", func() (bool, string) {
		p := pods(t, ns, name)[cut]
		if podIsReady(p.Status.Conditions) {
			return false, "its Pod is Ready"
		}
		if clientServiceRoutesTo(t, ns, name, p.Status.PodIP) {
			return false, "the client Service still routes to it"
		}
		return true, ""
	})
	var fewest atomic.Int32
	fewest.Store(3)
	stop := watchReadyVoters(t, ns, name, &fewest)
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("120m")}}
	})
	rollHeldFor(t, ns, name, cut, cutUID, connected)
	// Quorum holds while the member is cut off: writes go on. The roll may
	// restart the cut member within seconds, while the writer's connection
	// still waits on it, so wait for a write rather than count the ones of
	// that moment.
	w.requireWritesAfter("cut", 1, time.Minute)
	w.mark("healing")
	healed = true
	if err := sb.Heal(context.Background(), ns, cut); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	stop()
	w.mark("rolled")
	if n := fewest.Load(); n < 2 {
		t.Errorf("only %d voters were ready at one point; a quorum of 3 is 2", n)
	}
	for _, p := range pods(t, ns, name) {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "120m" {
			t.Errorf("pod %s runs with %s CPU after the roll", p.Name, got)
		}
	}
	t.Logf("peer partition: longest write stall %s while cut, %s while rolling after the heal",
		w.longestStall("cut", "healing").Round(time.Millisecond), w.longestStall("healing", "rolled").Round(time.Millisecond))
	w.verify("rolled")
}

// followerAndOthers picks a member that does not lead, and the Pod UIDs of
// the others.
func followerAndOthers(t *testing.T, ns, name string) (string, map[string]string) {
	t.Helper()
	leader, err := leaderName(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var cut string
	others := map[string]string{}
	for _, m := range members(t, ns, name) {
		if m.Name != leader && cut == "" {
			cut = m.Name
			continue
		}
		others[m.Name] = string(pods(t, ns, name)[m.Name].UID)
	}
	return cut, others
}

// rollHeldFor waits until the operator holds the roll-out for the member cut
// off, or restarted that member (its new Pod has a new address, which the
// cut does not cover), failing if it restarted a connected member while the
// cut member was cut off.
func rollHeldFor(t *testing.T, ns, name, cut, cutUID string, connected map[string]string) {
	t.Helper()
	var restarted atomic.Value
	var cutRestarted atomic.Bool
	stop := every(200*time.Millisecond, func() {
		ps := pods(t, ns, name)
		if p, ok := ps[cut]; !ok || string(p.UID) != cutUID {
			cutRestarted.Store(true)
		}
		if cutRestarted.Load() {
			return
		}
		for m, uid := range connected {
			if p, ok := ps[m]; !ok || string(p.UID) != uid {
				restarted.CompareAndSwap(nil, m)
			}
		}
	})
	eventually(t, time.Minute, "the roll held for "+cut+", or "+cut+" restarted first", func() (bool, string) {
		p := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Progressing)
		held := p != nil && p.Reason == conditions.ReasonRollingOut && strings.Contains(p.Message, cut) && strings.Contains(p.Message, "healthy")
		return held || cutRestarted.Load(), condString(p)
	})
	stop()
	if m := restarted.Load(); m != nil {
		t.Fatalf("connected member %s was restarted while %s was cut off from its peers", m, cut)
	}
}

// clientServiceRoutesTo reports whether the client Service's EndpointSlices
// list the address as ready.
func clientServiceRoutesTo(t *testing.T, ns, cluster, ip string) bool {
	t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: manifest.ClientServiceName(cluster)}); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if slices.Contains(e.Addresses, ip) && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}
