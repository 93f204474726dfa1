package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// rbacRelease is the release TestNamespacedRBAC installs the chart's RBAC
// as; its ServiceAccount is rbacRelease-etcd-operator.
const rbacRelease = "rbac"

// access is one request the operator's ServiceAccount may or may not make.
type access struct {
	name      string
	namespace string // "" for a cluster-scoped kind
	group     string
	resource  string // resource or resource/subresource
	verb      string
	allowed   bool
}

// TestNamespacedRBAC installs the chart's RBAC watching one namespace and
// asks the API server's authorizer (SubjectAccessReview) what the
// operator's ServiceAccount may do there, in another namespace and cluster-wide.
// It also checks against discovery that the chart splits the generated
// rules right: a namespaced kind in a ClusterRole would grant it everywhere,
// a cluster-scoped one in a Role nothing at all.
func TestNamespacedRBAC(t *testing.T) {
	release, watched, other := namespace(t), namespace(t), namespace(t)
	objs := installRBAC(t, release, watched)
	checkScopes(t, objs)

	const etcdGroup = "etcd-operator.cozystack.io"
	cases := []access{
		{"create Pods in the watched namespace", watched, "", "pods", "create", true},
		{"create Pods elsewhere", other, "", "pods", "create", false},
		{"evict Pods in the watched namespace", watched, "", "pods/eviction", "create", true},
		{"evict Pods elsewhere", other, "", "pods/eviction", "create", false},
		{"list Secrets in the watched namespace", watched, "", "secrets", "list", true},
		{"read Secrets elsewhere", other, "", "secrets", "get", false},
		{"create Secrets elsewhere", other, "", "secrets", "create", false},
		{"create Jobs in the watched namespace", watched, "batch", "jobs", "create", true},
		{"create Jobs elsewhere", other, "batch", "jobs", "create", false},
		{"create claims elsewhere", other, "", "persistentvolumeclaims", "create", false},
		{"create budgets elsewhere", other, "policy", "poddisruptionbudgets", "create", false},
		{"create Certificates elsewhere", other, "cert-manager.io", "certificates", "create", false},
		{"create snapshots elsewhere", other, etcdGroup, "etcdsnapshots", "create", false},
		{"write cluster status elsewhere", other, etcdGroup, "etcdclusters/status", "patch", false},
		// Kept cluster-wide on purpose (rbac.yaml): a member's finalizer is
		// released while its namespace, and the Role there, are deleted.
		{"patch members elsewhere", other, etcdGroup, "etcdmembers", "patch", true},
		{"delete members elsewhere", other, etcdGroup, "etcdmembers", "delete", false},
		{"list nodes", "", "", "nodes", "list", true},
		{"list storage classes", "", "storage.k8s.io", "storageclasses", "list", true},
		{"read namespaces", "", "", "namespaces", "get", true},
		{"create token reviews (metrics authentication)", "", "authentication.k8s.io", "tokenreviews", "create", true},
		{"renew its Lease in its namespace", release, "coordination.k8s.io", "leases", "update", true},
		{"write Leases in the watched namespace", watched, "coordination.k8s.io", "leases", "update", false},
	}
	// The authorizer learns of new roles through an informer.
	waitAllowed(t, release, cases[0])
	for _, c := range cases {
		if got := allowed(t, release, c); got != c.allowed {
			t.Errorf("%s (%s %s/%s in %q): allowed %v, want %v", c.name, c.verb, c.group, c.resource, c.namespace, got, c.allowed)
		}
	}
}

// installRBAC creates the chart's RBAC objects for a release in namespace
// release that watches watched; the test's cleanup deletes them.
func installRBAC(t *testing.T, release, watched string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := tools.RenderChart(rbacRelease, release, map[string]any{"manager": map[string]any{"watchNamespaces": []any{watched}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GroupVersionKind().Group != rbacv1.GroupName {
			continue
		}
		if err := k.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			if err := k.Delete(context.Background(), obj); err != nil {
				t.Errorf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
		out = append(out, obj)
	}
	return out
}

// checkScopes compares the manager's Role and ClusterRole with the scopes
// discovery reports. The ClusterRole's exceptions are clusters and members,
// kept cluster-wide on purpose.
func checkScopes(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	namespaced := servedScopes(t)
	for _, obj := range objs {
		if !strings.HasSuffix(obj.GetName(), "-manager-role") {
			continue
		}
		wantNamespaced := obj.GetKind() == "Role"
		for _, res := range grantedResources(t, obj) {
			isNamespaced, served := namespaced[res]
			deliberate := !wantNamespaced && (res == "etcd-operator.cozystack.io/etcdclusters" || res == "etcd-operator.cozystack.io/etcdmembers")
			if served && isNamespaced != wantNamespaced && !deliberate {
				t.Errorf("the %s %s grants %s, which is namespaced: %v", obj.GetKind(), obj.GetName(), res, isNamespaced)
			}
		}
	}
}

// grantedResources lists the group/resource pairs a Role or ClusterRole's
// rules name.
func grantedResources(t *testing.T, role *unstructured.Unstructured) []string {
	t.Helper()
	var r rbacv1.ClusterRole // a Role has the same rules
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rule := range r.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				out = append(out, g+"/"+res)
			}
		}
	}
	return out
}

// servedScopes maps group/resource (subresources included) to whether the
// test API server serves it namespaced.
func servedScopes(t *testing.T) map[string]bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range lists {
		group, _, _ := strings.Cut(l.GroupVersion, "/")
		if !strings.Contains(l.GroupVersion, "/") {
			group = ""
		}
		for _, r := range l.APIResources {
			out[group+"/"+r.Name] = r.Namespaced
		}
	}
	return out
}

func operatorUser(release string) (string, []string) {
	return fmt.Sprintf("system:serviceaccount:%s:%s-etcd-operator", release, rbacRelease),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"}
}

// allowed asks the authorizer whether the operator's ServiceAccount, of a
// release in namespace release, may make the request a.
func allowed(t *testing.T, release string, a access) bool {
	t.Helper()
	user, groups := operatorUser(release)
	resource, sub, _ := strings.Cut(a.resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.namespace, Group: a.group, Resource: resource, Subresource: sub, Verb: a.verb,
		},
	}}
	if err := k.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func waitAllowed(t *testing.T, release string, a access) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return allowed(t, release, a), nil
	})
	if err != nil {
		t.Fatalf("%s is not allowed 30s after the RBAC was created", a.name)
	}
}
