package lifecycle

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The oracle: checks on the operator's behaviour made from the fake etcd's
// ground truth, not from what the operator believes, and independent of
// whether etcd would have refused the call anyway (the operator must not
// lean on etcd's own checks).

func quorumOf(n int) int { return n/2 + 1 }

// checkRemove fails the test if removing the member would leave the voters
// that stay without a quorum of connected members.
func (h *harness) checkRemove(id uint64) {
	h.t.Helper()
	members := h.etcd.Members()
	i := slices.IndexFunc(members, func(m etcd.Member) bool { return m.ID == id })
	if i < 0 || members[i].IsLearner {
		return
	}
	stay, connected := 0, 0
	for _, m := range members {
		if m.IsLearner || m.ID == id {
			continue
		}
		stay++
		if running, leader := h.etcd.Running(m.PeerURLs[0]); running && leader {
			connected++
		}
	}
	if stay > 0 && connected < quorumOf(stay) {
		h.t.Errorf("the operator removed voter %s, leaving %d of %d voters connected (quorum %d)\n%s",
			etcd.FormatID(id), connected, stay, quorumOf(stay), h.etcd.String())
	}
}

// checkInvariants runs after every step, once the operator has reacted to
// what the step brought.
func (h *harness) checkInvariants(operatorRan bool) {
	h.t.Helper()
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.raw.List(context.Background(), clusters)
	for i := range clusters.Items {
		c := &clusters.Items[i]
		// What the operator writes is judged once it ran: a pass cut short
		// leaves the status and budget of the pass before.
		if operatorRan {
			h.checkReadyCountsVoters(c)
			h.checkBudget(c)
		}
	}
	h.checkRouting()
}

// checkRouting runs whenever Pod readiness may have changed: the endpoints
// controller routes by it at once, without waiting for the operator.
func (h *harness) checkRouting() {
	h.t.Helper()
	if !h.checkClientEndpoints {
		return
	}
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.raw.List(context.Background(), clusters)
	for i := range clusters.Items {
		h.checkClientService(&clusters.Items[i])
	}
}

// checkClientService: every ready Pod the client Service selects is a voter
// in etcd that has a leader and serves clients, so no client is routed to a
// learner, to a member cut off from its peers, or to one whose client port
// does not serve yet.
func (h *harness) checkClientService(c *v1alpha2.EtcdCluster) {
	h.t.Helper()
	svc := &corev1.Service{}
	if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.ClientServiceName(c.Name)}, svc); err != nil {
		return
	}
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels(svc.Spec.Selector))
	voters := map[string]bool{}
	for _, m := range h.etcd.Members() {
		voters[m.PeerURLs[0]] = !m.IsLearner
	}
	for _, p := range list.Items {
		ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		})
		peer := etcdFlags(&p)["--initial-advertise-peer-urls"]
		if ready && !voters[peer] {
			h.t.Errorf("the client Service of %s routes to %s, which is not a voter", c.Name, p.Name)
		}
		if _, leader := h.etcd.Running(peer); ready && !leader {
			h.t.Errorf("the client Service of %s routes to %s, which has no leader (cut off from its peers)", c.Name, p.Name)
		}
		if ready && slices.Contains(h.etcd.Publishing(), peer) {
			h.t.Errorf("the client Service of %s routes to %s, which has not published itself and serves no client yet", c.Name, p.Name)
		}
	}
}

// checkReadyCountsVoters: readyMembers never counts a member etcd does not
// list as a voter, so a learner is never reported as serving.
func (h *harness) checkReadyCountsVoters(c *v1alpha2.EtcdCluster) {
	h.t.Helper()
	voters := 0
	for _, m := range h.etcd.Members() {
		if !m.IsLearner {
			voters++
		}
	}
	if int(c.Status.ReadyMembers) > voters {
		h.t.Errorf("cluster %s reports %d ready members with %d voters in etcd", c.Name, c.Status.ReadyMembers, voters)
	}
}

// checkBudget: the evictions the PodDisruptionBudget allows right now
// (ready Pods it selects beyond minAvailable) must leave a quorum of etcd's
// voters connected once every voter being removed is gone.
func (h *harness) checkBudget(c *v1alpha2.EtcdCluster) {
	h.t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: c.Name}, pdb); err != nil {
		return
	}
	selected, err := h.selectedReadyPods(pdb)
	if err != nil || pdb.Spec.MinAvailable == nil {
		return
	}
	allowed := max(0, len(selected)-pdb.Spec.MinAvailable.IntValue())
	if allowed == 0 {
		return
	}
	leaving := map[string]bool{}
	for _, m := range h.members(c.Name) {
		if m.DeletionTimestamp != nil {
			leaving[manifest.PeerURL(&m)] = true
		}
	}
	stay, connected := 0, 0
	for _, m := range h.etcd.Members() {
		if m.IsLearner || leaving[m.PeerURLs[0]] {
			continue
		}
		stay++
		if running, leader := h.etcd.Running(m.PeerURLs[0]); running && leader {
			connected++
		}
	}
	// The worst case: every allowed eviction hits a connected voter that stays.
	if stay > 0 && connected-allowed < quorumOf(stay) {
		h.t.Errorf("the budget of %s allows %d evictions (%d ready Pods selected, minAvailable %v) with %d of %d staying voters connected: quorum %d would be lost",
			c.Name, allowed, len(selected), pdb.Spec.MinAvailable, connected, stay, quorumOf(stay))
	}
}

func (h *harness) selectedReadyPods(pdb *policyv1.PodDisruptionBudget) ([]string, error) {
	list := &corev1.PodList{}
	if err := h.raw.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels(pdb.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				out = append(out, p.Name)
			}
		}
	}
	return out, nil
}
