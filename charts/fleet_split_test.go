package charts

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// managerArgs is the manager container's arguments in the release's
// Deployment.
func managerArgs(t *testing.T, release string, values map[string]any) []string {
	t.Helper()
	objs, err := tools.RenderChart(release, "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		fromUnstructured(t, obj, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return c.Args
			}
		}
	}
	t.Fatalf("release %s renders no manager container", release)
	return nil
}

// The workers are set from the values, and the default is what the
// operator's own default is.
func TestWorkersFromValues(t *testing.T) {
	args := managerArgs(t, "eo", nil)
	for _, want := range []string{"--cluster-workers=16", "--member-workers=32"} {
		if !slices.Contains(args, want) {
			t.Errorf("default args %v lack %s", args, want)
		}
	}
	args = managerArgs(t, "eo", map[string]any{"manager": map[string]any{"clusterWorkers": 40, "memberWorkers": 64}})
	for _, want := range []string{"--cluster-workers=40", "--member-workers=64"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	for _, bad := range []any{0, -1, "many"} {
		if _, err := tools.RenderChart("eo", "ops", map[string]any{"manager": map[string]any{"clusterWorkers": bad}}); err == nil {
			t.Errorf("clusterWorkers %v was accepted", bad)
		}
	}
}

// A fleet split between two releases installed in one namespace, each
// watching its own namespaces, the second without the CRDs (the first
// installs them) and with its own leader-election Lease: no two objects of
// the releases share a name, and the operators elect leaders through
// different Leases (with one Lease, one of them would wait forever for the
// other's, and its clusters would have no operator).
func TestFleetSplitInOneNamespace(t *testing.T) {
	a := map[string]any{"manager": map[string]any{"watchNamespaces": []any{"tenants-a"}}}
	b := map[string]any{"crds": map[string]any{"enabled": false},
		"manager": map[string]any{"watchNamespaces": []any{"tenants-b"}, "leaderElectionID": "etcd-operator-b"}}
	seen := map[string]string{}
	for release, values := range map[string]map[string]any{"a": a, "b": b} {
		objs, err := tools.RenderChart(release, "ops", values)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			key := fmt.Sprintf("%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
			if other, ok := seen[key]; ok {
				t.Errorf("releases %s and %s both render %s", other, release, key)
			}
			seen[key] = release
		}
	}
	argsA, argsB := managerArgs(t, "a", a), managerArgs(t, "b", b)
	if slices.ContainsFunc(argsA, func(s string) bool { return strings.HasPrefix(s, "--leader-election-id") }) {
		t.Errorf("release a names a Lease (%v): the default keeps the operator's built-in one", argsA)
	}
	if !slices.Contains(argsB, "--leader-election-id=etcd-operator-b") {
		t.Errorf("release b's args %v do not name its own Lease", argsB)
	}
	if _, err := tools.RenderChart("b", "ops", map[string]any{"manager": map[string]any{"leaderElectionID": "Not A Name"}}); err == nil {
		t.Error("a leaderElectionID that is no Kubernetes name was accepted")
	}
}
