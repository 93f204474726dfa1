package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The disruption stand-in: as in Kubernetes, a PodDisruptionBudget's
// status (how many disruptions it allows) is computed by a controller from
// the Pods' readiness, a moment after they change (here: at the end of each
// step), and the Eviction API admits an eviction only while that status
// allows one, lowering it at once. A Pod deleted directly never touches the
// budget: that is the race a drain can win against a direct delete.

// refreshBudgets is the disruption controller: each budget allows the ready
// Pods it selects beyond minAvailable.
func (h *harness) refreshBudgets() {
	list := &policyv1.PodDisruptionBudgetList{}
	_ = h.raw.List(context.Background(), list)
	h.budgetAllows = map[string]int{}
	for _, pdb := range list.Items {
		ready, _ := h.selectedReadyPods(&pdb)
		allowed := 0
		if pdb.Spec.MinAvailable != nil {
			allowed = max(0, len(ready)-pdb.Spec.MinAvailable.IntValue())
		}
		h.budgetAllows[pdb.Namespace+"/"+pdb.Name] = allowed
	}
}

// evict is the Eviction API: a Ready Pod a budget selects goes only while
// the budget's status allows a disruption, which the eviction uses up.
func (h *harness) evict(ctx context.Context, pod *corev1.Pod) error {
	have := &corev1.Pod{}
	if err := h.raw.Get(ctx, client.ObjectKeyFromObject(pod), have); err != nil {
		return err
	}
	if pod.UID != "" && have.UID != pod.UID {
		return apierrors.NewConflict(corev1.Resource("pods"), pod.Name, fmt.Errorf("UID precondition failed"))
	}
	if podIsReady(have) {
		list := &policyv1.PodDisruptionBudgetList{}
		_ = h.raw.List(ctx, list, client.InNamespace(have.Namespace))
		for _, pdb := range list.Items {
			sel, err := metav1LabelSelector(&pdb)
			if err != nil || !sel.Matches(labels.Set(have.Labels)) {
				continue
			}
			key := pdb.Namespace + "/" + pdb.Name
			if h.budgetAllows[key] <= 0 {
				h.evictionsRefused++
				return apierrors.NewTooManyRequests(fmt.Sprintf("Cannot evict pod as it would violate the pod's disruption budget %s", key), 10)
			}
			h.budgetAllows[key]--
		}
	}
	h.evictions++
	return h.raw.Delete(ctx, have)
}

func metav1LabelSelector(pdb *policyv1.PodDisruptionBudget) (labels.Selector, error) {
	if pdb.Spec.Selector == nil {
		return labels.Nothing(), nil
	}
	return labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels), nil
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// drain cordons a node and evicts every Pod on it through the budget, as
// kubectl drain does; it reports how many evictions the budget refused (a
// real drain retries them).
func (h *harness) drain(node string) int {
	h.cordoned[node] = true
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list)
	refused := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != node {
			continue
		}
		if err := h.evict(context.Background(), p); apierrors.IsTooManyRequests(err) {
			refused++
		}
	}
	return refused
}
