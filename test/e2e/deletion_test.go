package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
)

// TestDeletionLeavesNothing deletes a running cluster: members (despite their
// finalizers), Pods, claims, Services and the budget all go.
func TestDeletionLeavesNothing(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-deletion")
	const name = "doomed"
	c := newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	if err := k.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	sel := client.MatchingLabels{build.LabelCluster: name}
	eventually(t, 2*time.Minute, "everything of the cluster gone", func() (bool, string) {
		left := map[string]int{}
		count := func(kind string, list client.ObjectList) {
			if err := k.List(context.Background(), list, client.InNamespace(ns), sel); err == nil {
				if n := meta.LenList(list); n > 0 {
					left[kind] = n
				}
			}
		}
		count("EtcdMember", &v1alpha2.EtcdMemberList{})
		count("Pod", &corev1.PodList{})
		count("PersistentVolumeClaim", &corev1.PersistentVolumeClaimList{})
		count("Service", &corev1.ServiceList{})
		count("PodDisruptionBudget", &policyv1.PodDisruptionBudgetList{})
		cl := &v1alpha2.EtcdClusterList{}
		if err := k.List(context.Background(), cl, client.InNamespace(ns)); err == nil && len(cl.Items) > 0 {
			left["EtcdCluster"] = len(cl.Items)
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}
