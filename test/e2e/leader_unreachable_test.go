package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

const leaderCutNS = "e2e-leadercut"

func init() { suiteNamespaces = append(suiteNamespaces, leaderCutNS) }

// TestLeaderClientPortCut cuts only the etcd leader's client
// port (2379) off, from the operator and every client, for a minute, with a
// writer and a reader running (issue 41, claim 1). The followers still hear
// the leader on 2380 and name it: that is a quorum, whatever the operator
// can reach. The cluster must never be called QuorumLost (nor leaderless),
// says Degraded LeaderUnreachable instead, answers a dry run NotNeeded, and
// changes no member: no new ID, no replaced Pod, no survivor mark, no
// recovery phase; the disruption budget never asks for more Pods than there
// are voters. Writes go on through the followers, and after the heal.
func TestLeaderClientPortCut(t *testing.T) {
	t.Parallel()
	ns := namespace(t, leaderCutNS)
	const name = "leadercut"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 10, time.Minute)
	leader, err := leaderName(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	watch := watchCluster(t, ns, name, identityKept(t, ns, name), noSurvivorMark, noRecoveryRuns, noQuorumLoss, budgetWithinVoters)

	w.mark("cut")
	cutAt := time.Now()
	if err := sb.PartitionPorts(context.Background(), ns, leader, manifest.ClientPort); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = sb.Heal(context.Background(), ns, leader)
		}
	})
	eventually(t, time.Minute, "Degraded LeaderUnreachable", func() (bool, string) {
		if ok, seen := watch.clean(); !ok {
			return false, seen
		}
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Status == metav1.ConditionTrue && d.Reason == conditions.ReasonLeaderUnreachable, condString(d)
	})
	t.Logf("Degraded LeaderUnreachable %s after the cut", time.Since(cutAt).Round(time.Second))
	annotateRecover(t, ns, name, manifest.RecoverDryRun)
	waitRecoveryAnswer(t, ns, name, manifest.RecoverDryRun, v1alpha2.RecoveryNotNeeded)
	// Quorum holds: writes go on through the followers.
	w.requireWritesAfter("cut", 5, time.Minute)
	// The cut lasts a minute in all: three times the quorum-loss grace,
	// and long enough for the disruption budget to be written again.
	consistently(t, max(time.Until(cutAt.Add(time.Minute)), 5*time.Second), "nothing the operator must not do", watch.clean)
	requireLeaderNamed(t, ns, name, leader)

	w.mark("healing")
	healed = true
	if err := sb.Heal(context.Background(), ns, leader); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	eventually(t, time.Minute, "Degraded cleared", func() (bool, string) {
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Status == metav1.ConditionFalse, condString(d)
	})
	watch.check(t)
	t.Logf("seen: %s", watch.seen())
	t.Logf("leader's client port cut: longest write stall %s while cut, %s after the heal",
		w.longestStall("cut", "healing").Round(time.Millisecond), w.longestStall("healing", "").Round(time.Millisecond))
	w.verify("healing")
}

// waitRecoveryAnswer waits until status.recovery answers the request with
// the phase.
func waitRecoveryAnswer(t *testing.T, ns, name, request, phase string) *v1alpha2.RecoveryStatus {
	t.Helper()
	var rec *v1alpha2.RecoveryStatus
	eventually(t, time.Minute, fmt.Sprintf("recovery %s for %q", phase, request), func() (bool, string) {
		rec = getCluster(t, ns, name).Status.Recovery
		return rec != nil && rec.Request == request && rec.Phase == phase, fmt.Sprintf("%+v", rec)
	})
	t.Logf("recovery answer to %q: %s: %s", request, rec.Phase, rec.Message)
	return rec
}

// requireLeaderNamed checks that every member but the leader, asked
// directly, names it as their leader: the cut left raft alone.
func requireLeaderNamed(t *testing.T, ns, name, leader string) {
	t.Helper()
	var want uint64
	for _, m := range members(t, ns, name) {
		if m.Name == leader {
			id, err := etcd.ParseID(m.Status.MemberID)
			if err != nil {
				t.Fatal(err)
			}
			want = id
		}
	}
	for _, m := range members(t, ns, name) {
		if m.Name == leader {
			continue
		}
		eventually(t, 15*time.Second, m.Name+" names "+leader+" its leader", func() (bool, string) {
			st, err := leaderOf(ns, name, m.Name)
			if err != nil {
				return false, err.Error()
			}
			return st == want, fmt.Sprintf("leader %x, want %x", st, want)
		})
	}
}

// leaderOf asks one member's etcd which member it follows.
func leaderOf(ns, cluster, member string) (uint64, error) {
	ep := clientURLOf(ns, cluster, member)
	c, err := dialCluster(ns, cluster, []string{ep})
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := c.Status(ctx, ep)
	if err != nil {
		return 0, err
	}
	return st.Leader, nil
}

// clusterWatch looks at a cluster every 250 ms, in the background, for
// what a drill must never see, and keeps the first sighting of each kind:
// a state that comes and goes between two of the drill's waits is caught
// too.
type clusterWatch struct {
	mu        sync.Mutex
	sightings map[string]string
	available map[string]bool
	// minAvailable are the budget's minimums seen.
	minAvailable map[int]bool
	stopOnce     sync.Once
	halt         func()
}

// clusterView is one look at a cluster and its objects.
type clusterView struct {
	cluster *v1alpha2.EtcdCluster
	members []v1alpha2.EtcdMember
	pods    map[string]corev1.Pod
	// budget is nil until the operator made it.
	budget *policyv1.PodDisruptionBudget
}

// never is a rule a watch holds a cluster to: what kind of breach the view
// shows and what was seen, or "" when it keeps the rule.
type never func(v clusterView) (kind, seen string)

func watchCluster(t *testing.T, ns, name string, rules ...never) *clusterWatch {
	cw := &clusterWatch{sightings: map[string]string{}, available: map[string]bool{}, minAvailable: map[int]bool{}}
	cw.halt = every(250*time.Millisecond, func() {
		if v, err := viewCluster(ns, name); err == nil {
			cw.record(v, rules)
		}
	})
	t.Cleanup(cw.stop)
	return cw
}

func (cw *clusterWatch) stop() { cw.stopOnce.Do(cw.halt) }

func (cw *clusterWatch) record(v clusterView, rules []never) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if a := conditions.Get(v.cluster.Status.Conditions, conditions.Available); a != nil {
		cw.available[string(a.Status)+"/"+a.Reason] = true
	}
	if v.budget != nil && v.budget.Spec.MinAvailable != nil {
		cw.minAvailable[v.budget.Spec.MinAvailable.IntValue()] = true
	}
	for _, rule := range rules {
		kind, seen := rule(v)
		if _, had := cw.sightings[kind]; kind != "" && !had {
			cw.sightings[kind] = time.Now().Format(time.StampMilli) + ": " + seen
		}
	}
}

// clean reports whether nothing was sighted so far, and if not, what was.
func (cw *clusterWatch) clean() (bool, string) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var out []string
	for kind, seen := range cw.sightings {
		out = append(out, kind+" ("+seen+")")
	}
	sort.Strings(out)
	return len(out) == 0, strings.Join(out, "; ")
}

// check stops the watch and fails the test for each sighting.
func (cw *clusterWatch) check(t *testing.T) {
	t.Helper()
	cw.stop()
	if ok, seen := cw.clean(); !ok {
		t.Errorf("the cluster showed what it must never show: %s", seen)
	}
}

// seen says which Available conditions (as status/reason) and which
// budget minimums the watch saw.
func (cw *clusterWatch) seen() string {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var reasons []string
	for r := range cw.available {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	var mins []int
	for n := range cw.minAvailable {
		mins = append(mins, n)
	}
	sort.Ints(mins)
	return fmt.Sprintf("Available %s; budget minAvailable %v", strings.Join(reasons, ", "), mins)
}

// viewCluster reads a cluster and its objects without a test handle, for
// the watch's goroutine.
func viewCluster(ns, name string) (clusterView, error) {
	ctx := context.Background()
	v := clusterView{cluster: &v1alpha2.EtcdCluster{}}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, v.cluster); err != nil {
		return v, err
	}
	list := &v1alpha2.EtcdMemberList{}
	if err := k.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: name}); err != nil {
		return v, err
	}
	v.members = list.Items
	var err error
	if v.pods, err = clusterPods(ns, name); err != nil {
		return v, err
	}
	budget := &policyv1.PodDisruptionBudget{}
	switch err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, budget); {
	case err == nil:
		v.budget = budget
	case client.IgnoreNotFound(err) != nil:
		return v, err
	}
	return v, nil
}

// identityKept is the rule that every member the cluster has now keeps
// its etcd ID and its Pod: nothing is restarted as a new member, forced,
// fenced or replaced.
func identityKept(t *testing.T, ns, name string) never {
	t.Helper()
	ids, uids := map[string]string{}, map[string]string{}
	ps := pods(t, ns, name)
	for _, m := range members(t, ns, name) {
		if m.Status.MemberID == "" {
			t.Fatalf("member %s has no etcd ID yet", m.Name)
		}
		ids[m.Name], uids[m.Name] = m.Status.MemberID, string(ps[m.Name].UID)
	}
	return func(v clusterView) (string, string) {
		for _, m := range v.members {
			if id, ok := ids[m.Name]; !ok || m.Status.MemberID != id {
				return "a member changed identity", fmt.Sprintf("%s is %q, was %q", m.Name, m.Status.MemberID, id)
			}
		}
		if len(v.members) != len(ids) {
			return "a member went", fmt.Sprint(memberNames(v.members))
		}
		for m, uid := range uids {
			if p, ok := v.pods[m]; !ok || string(p.UID) != uid {
				return "a member's Pod was replaced", fmt.Sprintf("%s: Pod %q, was %q", m, p.UID, uid)
			}
		}
		return "", ""
	}
}

// noSurvivorMark is the rule that no member and no Pod holds a
// recovery's survivor mark.
func noSurvivorMark(v clusterView) (string, string) {
	for _, m := range v.members {
		if mark, ok := m.Annotations[manifest.AnnotationForceNewCluster]; ok {
			return "a survivor mark", fmt.Sprintf("member %s: %q", m.Name, mark)
		}
	}
	for _, p := range v.pods {
		if mark, ok := p.Annotations[manifest.AnnotationForceNewCluster]; ok {
			return "a survivor mark", fmt.Sprintf("pod %s: %q", p.Name, mark)
		}
	}
	return "", ""
}

// noRecoveryRuns is the rule that no recovery moves past a plan: no
// member fenced, no recovery phase beyond Planned.
func noRecoveryRuns(v clusterView) (string, string) {
	if r := v.cluster.Status.Recovery; r != nil && !slices.Contains([]string{
		v1alpha2.RecoveryPlanned, v1alpha2.RecoveryNotNeeded, v1alpha2.RecoveryRefused}, r.Phase) {
		return "a recovery ran", fmt.Sprintf("phase %s: %s", r.Phase, r.Message)
	}
	for _, m := range v.members {
		if m.Spec.Dormant {
			return "a member was fenced", m.Name + " is dormant"
		}
	}
	return "", ""
}

// noQuorumLoss is the rule that the cluster is never called QuorumLost,
// nor leaderless: a member names a leader all along.
func noQuorumLoss(v clusterView) (string, string) {
	if a := conditions.Get(v.cluster.Status.Conditions, conditions.Available); a != nil &&
		(a.Reason == conditions.ReasonQuorumLost || a.Reason == conditions.ReasonNoLeader) {
		return "Available " + a.Reason, condString(a)
	}
	if d := conditions.Get(v.cluster.Status.Conditions, conditions.Degraded); d != nil && d.Reason == conditions.ReasonQuorumLost {
		return "Degraded QuorumLost", condString(d)
	}
	if s := v.cluster.Status.NoLeaderSince; s != nil {
		return "noLeaderSince set", s.String()
	}
	return "", ""
}

// budgetWithinVoters is the rule that the disruption budget never asks
// for more available Pods than the cluster has voters: a budget no
// eviction can meet blocks every drain for good.
func budgetWithinVoters(v clusterView) (string, string) {
	if v.budget == nil || v.budget.Spec.MinAvailable == nil {
		return "", ""
	}
	voters := 0
	for _, p := range v.pods {
		if p.Labels[manifest.LabelRole] == manifest.RoleVoter && p.DeletionTimestamp == nil {
			voters++
		}
	}
	if n := v.budget.Spec.MinAvailable.IntValue(); n > voters {
		return "the budget asks for more than the voters", fmt.Sprintf("minAvailable %d, %d voters", n, voters)
	}
	return "", ""
}
