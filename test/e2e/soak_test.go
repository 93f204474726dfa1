//go:build soak

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The soak (make soak): clusters with a writer and a reader each, and, for a
// set duration, a seeded random schedule of faults, one at a time, each
// followed by the wait for the cluster to be whole again. A monitor asks
// every member for its status four times a second and records each moment
// fewer than a quorum of the voters were connected, with the action (a
// fault, or the operator's own, from its Events) that preceded it. The
// report says, per cluster: acknowledged writes and how many survived, the
// linearizability verdict, the longest write stall per fault kind, the
// quorum losses, and any condition left stuck. It fails on a lost
// acknowledged write, a non-linearizable history, a quorum loss that
// followed the operator's own action, or a cluster that did not recover.

var (
	soakDuration = flag.Duration("soak.duration", 30*time.Minute, "how long to inject faults")
	soakSeed     = flag.Uint64("soak.seed", 0, "seed of the fault schedule (0: from the clock; printed, so a failure replays)")
	soakClusters = flag.Int("soak.clusters", 2, "clusters under test")
)

const soakNS = "e2e-soak"

func init() { suiteNamespaces = append(suiteNamespaces, soakNS) }

// faultKinds are the faults the schedule draws from.
var faultKinds = []string{
	"pod-kill", "pod-delete", "operator-kill", "partition", "peer-partition",
	"node-stop", "volume-wipe", "scale-up-down", "roll-out", "version-roll", "cert-renewal",
}

// soakNextVersion is the release a version roll-out moves a cluster to from
// the one it runs: up a minor, and back down.
var soakNextVersion = map[string]string{etcdVersion: "3.7.3", "3.7.3": etcdVersion}

// action is one thing that happened to a cluster: a fault the soak made, or
// a change the operator made (from its Events).
type action struct {
	At      time.Time `json:"at"`
	By      string    `json:"by"` // "fault" or "operator"
	What    string    `json:"what"`
	Cluster string    `json:"cluster"`
}

// quorumLoss is a moment with fewer than a quorum of voters connected.
type quorumLoss struct {
	At       time.Time `json:"at"`
	Cluster  string    `json:"cluster"`
	Voters   int       `json:"voters"`
	Led      int       `json:"connected"`
	After    action    `json:"after"`
	Operator bool      `json:"followedOperatorAction"`
}

// soakCluster is one cluster under test and what was measured on it.
type soakCluster struct {
	name    string
	w       *writer
	stalls  map[string]time.Duration
	stuck   []string
	faults  map[string]int
	healthy bool
	// tls is the CA and names of a cluster with mutual TLS, whose
	// certificates a renewal replaces; nil for a plaintext cluster.
	tls *soakTLS
}

type soakTLS struct {
	ca      *testCA
	domains []string
}

type soak struct {
	t        *testing.T
	rng      *rand.Rand
	clusters []*soakCluster
	mu       sync.Mutex
	actions  []action
	losses   []quorumLoss
}

func TestSoak(t *testing.T) {
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak seed %d (replay: make soak SOAK_SEED=%d), %s, %d clusters", seed, seed, *soakDuration, *soakClusters)
	s := &soak{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
	namespace(t, soakNS)
	for i := range *soakClusters {
		name := fmt.Sprintf("soak-%d", i)
		c := &soakCluster{name: name, stalls: map[string]time.Duration{}, faults: map[string]int{}}
		// The last cluster runs with mutual TLS, so certificate renewals
		// have a cluster to roll.
		if i == *soakClusters-1 {
			c.tls = newSoakTLS(t, name)
			newCluster(t, soakNS, name, 3, c.tls.spec(name))
		} else {
			newCluster(t, soakNS, name, 3)
		}
		s.clusters = append(s.clusters, c)
	}
	for _, c := range s.clusters {
		waitReconciled(t, soakNS, c.name, 3, 5*time.Minute)
		c.w = startWriter(t, soakNS, c.name)
		c.w.requireWritesAfter("", 10, time.Minute)
	}
	stopEvents := s.watchOperatorEvents()
	stopMonitors := s.monitorQuorum()
	deadline := time.Now().Add(*soakDuration)
	for n := 0; time.Now().Before(deadline); n++ {
		c := s.clusters[s.rng.IntN(len(s.clusters))]
		kind := faultKinds[s.rng.IntN(len(faultKinds))]
		if kind == "cert-renewal" {
			c = s.clusters[len(s.clusters)-1]
		}
		s.inject(n, c, kind)
	}
	stopMonitors()
	stopEvents()
	s.report(seed)
}

// inject applies one fault to a cluster, then waits for it to be whole.
func (s *soak) inject(n int, c *soakCluster, kind string) {
	t := s.t
	mark := fmt.Sprintf("fault-%d", n)
	c.w.mark(mark)
	s.record("fault", c.name, kind)
	c.faults[kind]++
	if err := s.apply(c, kind); err != nil {
		t.Logf("fault %d %s on %s: %v", n, kind, c.name, err)
	}
	if !s.recovered(c, 8*time.Minute) {
		c.stuck = append(c.stuck, fmt.Sprintf("after %s: %s", kind, clusterConditions(t, c.name)))
	}
	end := mark + "-end"
	c.w.mark(end)
	if d := c.w.longestStall(mark, end); d > c.stalls[kind] {
		c.stalls[kind] = d
	}
}

// apply makes the fault happen.
func (s *soak) apply(c *soakCluster, kind string) error {
	ctx := context.Background()
	m := s.someMember(c)
	switch kind {
	case "pod-kill":
		return sb.Kill(ctx, soakNS, m, manifest.EtcdContainer)
	case "pod-delete":
		return k.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: soakNS, Name: m}})
	case "operator-kill":
		return k.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/name": "etcd-operator"})
	case "partition", "peer-partition":
		var err error
		if kind == "partition" {
			err = sb.Partition(ctx, soakNS, m)
		} else {
			err = sb.PartitionPorts(ctx, soakNS, m, 2380)
		}
		if err != nil {
			return err
		}
		s.hold(5, 20)
		return sb.Heal(ctx, soakNS, m)
	case "node-stop":
		node := pods(s.t, soakNS, c.name)[m].Spec.NodeName
		if node == "" || node == s.operatorNode() {
			return fmt.Errorf("skipped: member %s shares node %q with the operator", m, node)
		}
		if err := sb.StopNode(ctx, node); err != nil {
			return err
		}
		s.hold(10, 45)
		return sb.StartNode(ctx, node)
	case "volume-wipe":
		if err := sb.Wipe(ctx, soakNS, manifest.PVCName(m)); err != nil {
			return err
		}
		return sb.Kill(ctx, soakNS, m, manifest.EtcdContainer)
	case "scale-up-down":
		setReplicas(s.t, soakNS, c.name, 5)
		waitReconciled(s.t, soakNS, c.name, 5, 5*time.Minute)
		setReplicas(s.t, soakNS, c.name, 3)
		return nil
	case "roll-out":
		cpu := fmt.Sprintf("%dm", 100+s.rng.IntN(50))
		patchCluster(s.t, soakNS, c.name, func(cl *v1alpha2.EtcdCluster) {
			cl.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
		})
		return nil
	case "version-roll":
		from := getCluster(s.t, soakNS, c.name).Spec.Version
		to, ok := soakNextVersion[from]
		if !ok {
			return fmt.Errorf("no version to roll %s to", from)
		}
		patchCluster(s.t, soakNS, c.name, func(cl *v1alpha2.EtcdCluster) { cl.Spec.Version = to })
		return nil
	case "cert-renewal":
		if c.tls == nil {
			return fmt.Errorf("skipped: cluster %s has no TLS", c.name)
		}
		return c.tls.renew(s.t, c.name)
	}
	return fmt.Errorf("unknown fault %s", kind)
}

func newSoakTLS(t *testing.T, name string) *soakTLS {
	ca := newNamedCA(t, "soak CA "+name)
	st := &soakTLS{ca: ca, domains: []string{"*." + name + "." + soakNS + ".svc", "*." + name + "." + soakNS + ".svc.cluster.local", name + "-client." + soakNS + ".svc", "localhost"}}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	operator := ca.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, soakNS, name+"-server", ca.issue(t, "server", st.domains, usage), ca.certPEM)
	createTLSSecret(t, soakNS, name+"-peer", ca.issue(t, "peer", st.domains[:2], usage), ca.certPEM)
	createTLSSecret(t, soakNS, name+"-operator", operator, ca.certPEM)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	clientTLS.Store(soakNS+"/"+name, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*x509Pair(t, operator)}})
	return st
}

// spec gives a cluster the TLS Secrets.
func (st *soakTLS) spec(name string) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = ownTLS(name)
	}
}

// renew issues new server and peer certificates from the same CA, as a
// certificate manager does before expiry, and waits until the operator
// started rolling them out (the cluster's generation does not change, so
// without this the wait for recovery could see the cluster before it).
func (st *soakTLS) renew(t *testing.T, name string) error {
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	changedAt := metav1.Now().Rfc3339Copy()
	updateSecret(t, soakNS, name+"-server", pairData(st.ca.issue(t, "server", st.domains, usage)))
	updateSecret(t, soakNS, name+"-peer", pairData(st.ca.issue(t, "peer", st.domains[:2], usage)))
	return wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		lr := getCluster(t, soakNS, name).Status.LastRollOut
		return lr != nil && !lr.StartTime.Before(&changedAt) && lr.Cause == v1alpha2.RollOutCauseSecrets, nil
	})
}

// hold waits a random time between lo and hi seconds: how long a fault lasts.
func (s *soak) hold(lo, hi int) {
	d := time.Duration(lo+s.rng.IntN(hi-lo+1)) * time.Second
	<-time.After(d)
}

// someMember picks a running member of the cluster.
func (s *soak) someMember(c *soakCluster) string {
	var names []string
	ps := pods(s.t, soakNS, c.name)
	for _, m := range members(s.t, soakNS, c.name) {
		if _, ok := ps[m.Name]; ok && m.DeletionTimestamp == nil {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names[s.rng.IntN(len(names))]
}

func (s *soak) operatorNode() string {
	list := &corev1.PodList{}
	if err := k.List(context.Background(), list, client.InNamespace(operatorNS)); err != nil || len(list.Items) == 0 {
		return ""
	}
	return list.Items[0].Spec.NodeName
}

// soakSettle is how long a cluster must stay whole before the next fault: a
// fault takes seconds to show (a wiped member is found lost when etcd
// exits), and the status right after it still shows the cluster before.
const soakSettle = 15 * time.Second

// recovered waits until the cluster is reconciled with 3 members, etcd's
// membership matches them, and it stays so for the settle period.
func (s *soak) recovered(c *soakCluster, timeout time.Duration) bool {
	var since time.Time
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(context.Context) (bool, error) {
		cl := getCluster(s.t, soakNS, c.name)
		p := conditions.Get(cl.Status.Conditions, conditions.Progressing)
		whole := p != nil && p.Reason == conditions.ReasonReconciled && p.ObservedGeneration == cl.Generation && cl.Status.ReadyMembers == 3 &&
			etcdMatchesMembers(s.t, soakNS, c.name) == nil
		switch {
		case !whole:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		return whole && time.Since(since) >= soakSettle, nil
	})
	return err == nil
}

func clusterConditions(t *testing.T, name string) string {
	var out []string
	for _, c := range getCluster(t, soakNS, name).Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}

func (s *soak) record(by, cluster, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actions = append(s.actions, action{At: time.Now(), By: by, What: what, Cluster: cluster})
}

// operatorActions are the Event reasons of the operator's own disruptive
// actions.
var operatorActions = []string{"MemberRemoved", "ReplacingMember", "RollingOut", "LeadershipMoved", "DowngradeEnabled", "MemberAdded", "MemberPromoted", "Paused"}

// watchOperatorEvents records the operator's disruptive actions.
func (s *soak) watchOperatorEvents() func() {
	seen := map[string]bool{}
	return every(500*time.Millisecond, func() {
		list := &eventsv1.EventList{}
		if err := k.List(context.Background(), list, client.InNamespace(soakNS)); err != nil {
			return
		}
		for _, e := range list.Items {
			if seen[string(e.UID)] || !slices.Contains(operatorActions, e.Reason) || e.Regarding.Kind != "EtcdCluster" {
				continue
			}
			seen[string(e.UID)] = true
			s.mu.Lock()
			s.actions = append(s.actions, action{At: e.EventTime.Time, By: "operator", What: e.Reason + ": " + e.Note, Cluster: e.Regarding.Name})
			s.mu.Unlock()
		}
	})
}

// monitorQuorum asks every member of every cluster for its status and
// records the moments fewer than a quorum of voters know the leader.
func (s *soak) monitorQuorum() func() {
	var stops []func()
	for _, c := range s.clusters {
		in := false
		stops = append(stops, every(250*time.Millisecond, func() {
			voters, led, served, err := connectedVoters(c.name)
			if err != nil {
				return
			}
			// A member slow to answer its status is not proof of a lost
			// quorum; a linearizable read that fails as well is.
			lost := led < voters/2+1 && !served
			if lost && !in {
				s.lossAt(c.name, voters, led)
			}
			in = lost
		}))
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

func (s *soak) lossAt(cluster string, voters, led int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := quorumLoss{At: time.Now(), Cluster: cluster, Voters: voters, Led: led}
	for i := len(s.actions) - 1; i >= 0; i-- {
		if a := s.actions[i]; a.Cluster == cluster && !a.At.After(l.At) {
			l.After, l.Operator = a, a.By == "operator"
			break
		}
	}
	s.losses = append(s.losses, l)
}

// connectedVoters asks each member of the cluster whom it follows: the
// voters, how many of them follow a leader, and whether a linearizable read
// (which needs a quorum) succeeds.
func connectedVoters(cluster string) (voters, led int, served bool, err error) {
	c, err := clusterClient(soakNS, cluster)
	if err != nil {
		return 0, 0, false, err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	list, err := c.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return 0, 0, false, err
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	_, rerr := c.Get(rctx, registerKey(cluster))
	rcancel()
	served = rerr == nil
	for _, m := range list.Members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			if !m.IsLearner {
				voters++
			}
			continue
		}
		voters++
		sctx, scancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		st, err := c.Status(sctx, m.ClientURLs[0])
		scancel()
		if err == nil && st.Leader != 0 {
			led++
		}
	}
	return voters, led, served, nil
}

// report prints the soak's findings, writes them under bin/, and fails on
// what must never happen.
func (s *soak) report(seed uint64) {
	t := s.t
	type clusterReport struct {
		Name         string             `json:"name"`
		Faults       map[string]int     `json:"faults"`
		StallSeconds map[string]float64 `json:"longestStallSecondsByFault"`
		Stuck        []string           `json:"stuck,omitempty"`
	}
	out := struct {
		Seed     uint64          `json:"seed"`
		Duration string          `json:"duration"`
		Clusters []clusterReport `json:"clusters"`
		Losses   []quorumLoss    `json:"quorumLosses"`
		Actions  []action        `json:"actions"`
	}{Seed: seed, Duration: soakDuration.String(), Losses: s.losses, Actions: s.actions}
	var b strings.Builder
	fmt.Fprintf(&b, "soak: seed %d, %s\n", seed, *soakDuration)
	for _, c := range s.clusters {
		r := clusterReport{Name: c.name, Faults: c.faults, StallSeconds: map[string]float64{}, Stuck: c.stuck}
		kinds := make([]string, 0, len(c.stalls))
		for kind, d := range c.stalls {
			r.StallSeconds[kind] = d.Seconds()
			kinds = append(kinds, kind)
		}
		sort.Strings(kinds)
		fmt.Fprintf(&b, "cluster %s: faults %v\n", c.name, c.faults)
		for _, kind := range kinds {
			fmt.Fprintf(&b, "  longest write stall after %-15s %s\n", kind, c.stalls[kind].Round(time.Millisecond))
		}
		for _, st := range c.stuck {
			fmt.Fprintf(&b, "  STUCK %s\n", st)
		}
		out.Clusters = append(out.Clusters, r)
		// Every acknowledged write present, the history linearizable.
		c.w.verify("")
	}
	fmt.Fprintf(&b, "faults:\n")
	for _, a := range s.actions {
		if a.By == "fault" {
			fmt.Fprintf(&b, "  %s %s %s\n", a.At.Format(time.TimeOnly), a.Cluster, a.What)
		}
	}
	for _, l := range s.losses {
		fmt.Fprintf(&b, "quorum lost on %s at %s (%d of %d voters led), after %s %q\n", l.Cluster, l.At.Format(time.TimeOnly), l.Led, l.Voters, l.After.By, l.After.What)
		if l.Operator {
			t.Errorf("quorum lost on %s right after the operator's own action %q", l.Cluster, l.After.What)
		}
	}
	t.Log(b.String())
	dir := filepath.Join(tools.RepoRoot(), "bin")
	_ = os.MkdirAll(dir, 0o755)
	_ = os.WriteFile(filepath.Join(dir, "soak-report.txt"), []byte(b.String()), 0o644)
	if js, err := json.MarshalIndent(out, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "soak-report.json"), js, 0o644)
	}
	for _, c := range s.clusters {
		if len(c.stuck) > 0 {
			t.Errorf("cluster %s did not recover %d times", c.name, len(c.stuck))
		}
	}
}
