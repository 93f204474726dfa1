package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// clusterGuardPolicy is the cluster guard as TestClusterDeletionGuard
// installs it (release guard); clusterGuardExtraUser goes to
// clusterDeletionProtection.additionalAllowedUsers.
const (
	clusterGuardPolicy    = "guard-etcd-operator-protect-clusters"
	clusterGuardExtraUser = "system:serviceaccount:flux-system:kustomize-controller"
)

var clusterDeletionCases = []deletionCase{
	{name: "a cluster admin", user: "jane"},
	{name: "break-glass annotation", user: "jane", annotation: "true", admitted: true},
	{name: "annotation True is not true", user: "jane", annotation: "True"},
	{name: "the namespace controller", user: "system:serviceaccount:kube-system:namespace-controller", admitted: true},
	{name: "an additional user", user: clusterGuardExtraUser, admitted: true},
	// Nothing owns an EtcdCluster but what a user puts above it: deleting
	// that owner is as much one command as deleting the cluster.
	{name: "the garbage collector", user: "system:serviceaccount:kube-system:generic-garbage-collector"},
	{name: "the garbage collector once annotated", user: "system:serviceaccount:kube-system:generic-garbage-collector", annotation: "true", admitted: true},
	{name: "the controller manager without per-controller credentials", user: "system:kube-controller-manager"},
	{name: "the operator", user: guardOperator},
}

// TestClusterDeletionGuard installs the chart's cluster guard, limited to
// one watched namespace, and deletes EtcdClusters as various users, each
// impersonated in system:masters so that only the policy decides.
// Deleting an EtcdCluster deletes its members and, through the garbage
// collector the member guard lets through, every member's volume: nobody
// but the namespace controller may without the break-glass annotation.
func TestClusterDeletionGuard(t *testing.T) {
	ns := namespace(t)
	installPolicy(t, clusterGuardPolicy, map[string]any{
		"manager":                   map[string]any{"watchNamespaces": []any{ns}},
		"clusterDeletionProtection": map[string]any{"additionalAllowedUsers": []any{clusterGuardExtraUser}},
	})
	waitClusterGuarding(t, ns)

	for _, tc := range clusterDeletionCases {
		t.Run(tc.name, func(t *testing.T) {
			tc.runOnCluster(t, ns)
		})
	}
	t.Run("a server-side dry run", func(t *testing.T) {
		c := guardedCluster(t, ns)
		checkClusterRefused(t, c, as(t, "jane").Delete(context.Background(), c, client.DryRunAll))
	})
	t.Run("the harness's own admin", func(t *testing.T) {
		c := guardedCluster(t, ns)
		checkClusterRefused(t, c, k.Delete(context.Background(), c))
	})
	t.Run("an unwatched namespace", func(t *testing.T) {
		c := guardedCluster(t, namespace(t))
		checkClusterAdmitted(t, c, as(t, "jane").Delete(context.Background(), c))
	})
	t.Run("a collection", func(t *testing.T) {
		c := guardedCluster(t, ns)
		err := as(t, "jane").DeleteAllOf(context.Background(), c, client.InNamespace(ns))
		if err == nil || !strings.Contains(err.Error(), clusterGuardPolicy) {
			t.Errorf("deleting every cluster at once: got %v, want a refusal by %s", err, clusterGuardPolicy)
		}
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(c), c.DeepCopy()); err != nil {
			t.Errorf("cluster %s after a refused collection delete: %v", c.GetName(), err)
		}
	})
}

// TestClusterDeletionGuardLetsANamespaceGo: once a guarded namespace is
// being deleted, its clusters go whoever deletes them, so the namespace
// never hangs on them (the namespace controller may run as
// system:kube-controller-manager, which the guard cannot tell from the
// garbage collector).
func TestClusterDeletionGuardLetsANamespaceGo(t *testing.T) {
	ns := namespace(t)
	installPolicy(t, clusterGuardPolicy, map[string]any{"manager": map[string]any{"watchNamespaces": []any{ns}}})
	waitClusterGuarding(t, ns)
	c := guardedCluster(t, ns)
	// No namespace controller runs here: the namespace stays Terminating.
	if err := k.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The policy reads the namespace from an informer, which learns of the
	// deletion a moment later; until then the guard refuses, changing
	// nothing.
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = as(t, "system:kube-controller-manager").Delete(ctx, c)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("deleting cluster %s in a terminating namespace: %v, want it admitted", c.GetName(), last)
	}
	checkClusterAdmitted(t, c, nil)
}

func (tc deletionCase) runOnCluster(t *testing.T, ns string) {
	ctx := context.Background()
	c := guardedCluster(t, ns)
	if tc.annotation != "" {
		// Setting the annotation is an update, which the guard leaves alone.
		c.SetAnnotations(map[string]string{manifest.AnnotationAllowDeletion: tc.annotation})
		if err := k.Update(ctx, c); err != nil {
			t.Fatalf("annotating the cluster: %v", err)
		}
	}
	err := as(t, tc.user).Delete(ctx, c)
	if tc.admitted {
		checkClusterAdmitted(t, c, err)
	} else {
		checkClusterRefused(t, c, err)
	}
}

// waitClusterGuarding waits until the API server enforces the cluster
// guard (see waitGuarding).
func waitClusterGuarding(t *testing.T, ns string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := guardedCluster(t, ns)
		last = as(t, "probe").Delete(ctx, probe)
		return last != nil && strings.Contains(last.Error(), clusterGuardPolicy), nil
	})
	if err != nil {
		t.Fatalf("the cluster guard is not enforced after 30s: the last probe deletion answered %v", last)
	}
}

// guardedCluster creates an EtcdCluster in ns; no operator runs here, so it
// has no finalizer and an admitted deletion removes it at once.
func guardedCluster(t *testing.T, ns string) *unstructured.Unstructured {
	t.Helper()
	c := object(t, cluster, ns, minimal)
	c.SetGenerateName("guarded-")
	if err := k.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func checkClusterAdmitted(t *testing.T, c *unstructured.Unstructured, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("deleting cluster %s: %v, want it admitted", c.GetName(), err)
	}
	err = k.Get(context.Background(), client.ObjectKeyFromObject(c), &v1alpha2.EtcdCluster{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("cluster %s after an admitted deletion: %v, want it gone", c.GetName(), err)
	}
}

// checkClusterRefused checks that the policy refused the deletion, saying
// which cluster, what it would have cost, and what to do instead.
func checkClusterRefused(t *testing.T, c *unstructured.Unstructured, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("deleting cluster %s was admitted, want it refused", c.GetName())
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonForbidden {
		t.Fatalf("deleting cluster %s: %v, want Forbidden", c.GetName(), err)
	}
	msg := err.Error()
	for _, want := range []string{
		fmt.Sprintf("ValidatingAdmissionPolicy '%s'", clusterGuardPolicy),
		"EtcdCluster " + c.GetName() + " in namespace " + c.GetNamespace(),
		"deletes its members and every member's data volume",
		"GitOps prune or a helm uninstall",
		"take a snapshot",
		"kubectl annotate etcdcluster -n " + c.GetNamespace() + " " + c.GetName() + " " + manifest.AnnotationAllowDeletion + "=true",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(c), &v1alpha2.EtcdCluster{}); err != nil {
		t.Errorf("cluster %s after a refused deletion: %v, want it still there", c.GetName(), err)
	}
}
