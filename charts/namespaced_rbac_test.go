package charts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// rbac is what the chart grants the operator's ServiceAccount, as rules
// flattened to group/resource:verb.
type rbac struct {
	cluster map[string][]rbacv1.PolicyRule // ClusterRoles by name
	roles   map[string][]rbacv1.PolicyRule // Roles by namespace/name
	bound   map[string]bool                // roles bound to the ServiceAccount, as kind namespace/name
}

const operatorSA = "eo-etcd-operator"

func renderRBAC(t *testing.T, values map[string]any) rbac {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	r := rbac{cluster: map[string][]rbacv1.PolicyRule{}, roles: map[string][]rbacv1.PolicyRule{}, bound: map[string]bool{}}
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			fromUnstructured(t, obj, &cr)
			r.cluster[cr.Name] = cr.Rules
		case "Role":
			var role rbacv1.Role
			fromUnstructured(t, obj, &role)
			r.roles[role.Namespace+"/"+role.Name] = role.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
			fromUnstructured(t, obj, &b)
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == operatorSA && s.Namespace == "ops" {
					ns := b.Namespace
					if b.RoleRef.Kind == "ClusterRole" && obj.GetKind() == "RoleBinding" {
						t.Fatalf("RoleBinding %s/%s binds a ClusterRole; the test does not expect that", ns, b.Name)
					}
					r.bound[b.RoleRef.Kind+" "+ns+"/"+b.RoleRef.Name] = true
				}
			}
		}
	}
	return r
}

// clusterWide is every right bound to the ServiceAccount in every namespace.
func (r rbac) clusterWide() map[string]bool {
	out := map[string]bool{}
	for name, rules := range r.cluster {
		if r.bound["ClusterRole /"+name] {
			addRights(out, rules)
		}
	}
	return out
}

// in is every right bound to the ServiceAccount in namespace ns, by Roles
// there or cluster-wide.
func (r rbac) in(ns string) map[string]bool {
	out := r.clusterWide()
	for key, rules := range r.roles {
		if strings.HasPrefix(key, ns+"/") && r.bound["Role "+key] {
			addRights(out, rules)
		}
	}
	return out
}

func addRights(into map[string]bool, rules []rbacv1.PolicyRule) {
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					into[g+"/"+res+":"+v] = true
				}
			}
		}
	}
}

// generatedRights are the rights of files/role.yaml, which controller-gen
// makes from the controllers' RBAC markers: what the operator needs.
func generatedRights(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tools.RepoRoot(), "charts", "etcd-operator", "files", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	addRights(out, role.Rules)
	return out
}

// namespacedWrites are rights on namespaced kinds that let the operator
// change another namespace's workloads or read its secrets: the claim was
// that the ClusterRole grants them everywhere.
var namespacedWrites = []string{
	"/pods:create", "/pods:delete", "/pods/eviction:create", "/secrets:get", "/secrets:create",
	"/persistentvolumeclaims:create", "/services:create", "batch/jobs:create", "batch/jobs:delete",
	"policy/poddisruptionbudgets:create", "cert-manager.io/certificates:create",
	"etcd-operator.cozystack.io/etcdsnapshots:create", "etcd-operator.cozystack.io/etcddefrags:create",
}

func TestDefaultInstallGrantsTheGeneratedRulesClusterWide(t *testing.T) {
	r := renderRBAC(t, nil)
	if got, want := r.cluster["eo-etcd-operator-manager-role"], generatedRights(t); !sameRights(got, want) {
		t.Errorf("watching every namespace, the manager ClusterRole is not the generated role: %v", got)
	}
	for key := range r.roles {
		if key != "ops/eo-etcd-operator-leader-election" {
			t.Errorf("watching every namespace, the chart renders the Role %s; want only the leader election's", key)
		}
	}
}

func TestNamespacedInstallGrantsWorkloadRightsOnlyInTheWatchedNamespaces(t *testing.T) {
	r := renderRBAC(t, map[string]any{"manager": map[string]any{"watchNamespaces": []any{"db", "db2"}}})
	wide := r.clusterWide()
	for _, right := range namespacedWrites {
		if wide[right] {
			t.Errorf("watching db and db2, a ClusterRole still grants %s in every namespace", right)
		}
	}
	for _, ns := range []string{"db", "db2"} {
		have := r.in(ns)
		for right := range generatedRights(t) {
			if !have[right] {
				t.Errorf("watching db and db2, the operator lacks %s in %s, which its controllers need", right, ns)
			}
		}
	}
	if other := r.in("web"); other["/pods:create"] || other["/secrets:get"] || other["batch/jobs:create"] {
		t.Error("watching db and db2, the operator may create Pods or Jobs or read Secrets in web")
	}
	// What stays cluster-wide, and why (rbac.yaml): cluster-scoped kinds the
	// operator reads (nodes for the tools volume, storage classes, namespaces
	// to skip one being deleted), reading clusters and members and patching
	// members to release finalizers while a namespace and its Role go, and
	// the metrics authentication's reviews.
	var writes []string
	for right := range wide {
		if verb := right[strings.LastIndex(right, ":")+1:]; !slices.Contains([]string{"get", "list", "watch"}, verb) {
			writes = append(writes, right)
		}
	}
	slices.Sort(writes)
	want := []string{
		"authentication.k8s.io/tokenreviews:create", "authorization.k8s.io/subjectaccessreviews:create",
		"etcd-operator.cozystack.io/etcdmembers:patch",
	}
	if !slices.Equal(writes, want) {
		t.Errorf("watching db and db2, the cluster-wide writes are %v, want %v", writes, want)
	}
	lease := "coordination.k8s.io/leases:update"
	if wide[lease] || !r.in("ops")[lease] || r.in("db")[lease] {
		t.Errorf("the leader election's Lease rights are not confined to the operator's namespace ops")
	}
}

func sameRights(rules []rbacv1.PolicyRule, want map[string]bool) bool {
	got := map[string]bool{}
	addRights(got, rules)
	if len(got) != len(want) {
		return false
	}
	for right := range want {
		if !got[right] {
			return false
		}
	}
	return true
}
