package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestDeletionLeavesNothing deletes a running cluster: members (despite their
// finalizers), Pods, claims, Services and the budget all go.
func TestDeletionLeavesNothing(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-deletion")
	const name = "doomed"
	c := newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	if err := deleteCluster(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	sel := client.MatchingLabels{manifest.LabelCluster: name}
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

// TestNamespaceDeletion deletes a namespace with two running clusters in it:
// nothing is recreated while everything goes (no "namespace is being
// terminated" errors), member finalizers do not hold the namespace up even
// though the operator's Role there goes too, and the namespace is gone
// quickly.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-nsdelete")
	for _, name := range []string{"first", "second"} {
		newCluster(t, ns, name, 3)
	}
	for _, name := range []string{"first", "second"} {
		waitReconciled(t, ns, name, 3, 4*time.Minute)
	}
	start := time.Now()
	if err := k.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "namespace "+ns+" gone", func() (bool, string) {
		err := k.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("namespace with 2 clusters of 3 deleted in %s", time.Since(start).Round(100*time.Millisecond))
	out, _ := kubectl("-n", operatorNS, "logs", "deploy/eo-etcd-operator", "--since=5m")
	errs := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"`+ns+`"`) && strings.Contains(line, "Reconciler error") {
			errs++
			if errs <= 3 {
				t.Logf("operator: %s", line)
			}
		}
	}
	if errs > 0 {
		t.Errorf("%d reconcile errors about %s while it was deleted", errs, ns)
	}
}
