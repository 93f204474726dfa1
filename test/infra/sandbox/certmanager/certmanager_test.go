package certmanager

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// TestClusterRoleAllows: every request the wired controllers make is allowed.
func TestClusterRoleAllows(t *testing.T) {
	rules := clusterRole().Rules
	for _, tc := range []struct{ group, resource, verb string }{
		{"cert-manager.io", "certificates", "watch"},
		{"cert-manager.io", "certificates/status", "update"},
		{"cert-manager.io", "certificaterequests", "create"},
		{"cert-manager.io", "certificaterequests", "delete"},
		{"cert-manager.io", "certificaterequests/status", "patch"},
		{"cert-manager.io", "issuers/status", "update"},
		{"cert-manager.io", "clusterissuers/status", "patch"},
		{"cert-manager.io", "clusterissuers", "list"},
		{"", "secrets", "create"},
		{"", "secrets", "update"},
		{"", "secrets", "delete"},
		{"", "secrets", "watch"},
		{"", "events", "create"},
	} {
		if !allows(rules, tc.group, tc.resource, tc.verb) {
			t.Errorf("ClusterRole does not allow %s %s.%s", tc.verb, tc.resource, tc.group)
		}
	}
	if !allows(leaseRole().Rules, "coordination.k8s.io", "leases", "create") {
		t.Error("lease Role does not allow creating the Lease")
	}
}

func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

// TestDeployment: the controller runs the given image with ClusterIssuer
// Secrets and the Lease in its own namespace, probed on its health port.
func TestDeployment(t *testing.T) {
	const image = "ghcr.io/x/cert-manager-controller:v1"
	var d *appsv1.Deployment
	for _, o := range Objects(image) {
		if dep, ok := o.(*appsv1.Deployment); ok {
			d = dep
		}
	}
	if d == nil {
		t.Fatal("no Deployment in Objects")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != image || d.Spec.Template.Spec.ServiceAccountName != Name {
		t.Errorf("image %q, service account %q", c.Image, d.Spec.Template.Spec.ServiceAccountName)
	}
	for _, arg := range []string{"--cluster-resource-namespace=" + Namespace, "--leader-elect", "--leader-election-namespace=" + Namespace} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %s: a rolling update deadlocks on the Lease", d.Spec.Strategy.Type)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.IntValue() != healthPort {
		t.Errorf("readiness probe %+v", c.ReadinessProbe.HTTPGet)
	}
}

// TestReadCRDs: CRD files parse; anything else in the directory is refused.
func TestReadCRDs(t *testing.T) {
	dir := t.TempDir()
	crd := "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: issuers.cert-manager.io\nspec:\n  group: cert-manager.io\n"
	if err := os.WriteFile(filepath.Join(dir, "issuers.yaml"), []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCRDs(dir)
	if err != nil || len(got) != 1 || got[0].Name != "issuers.cert-manager.io" {
		t.Fatalf("ReadCRDs = %v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("kind: ConfigMap\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCRDs(dir); err == nil {
		t.Error("a ConfigMap was read as a CRD")
	}
	if _, err := ReadCRDs(t.TempDir()); err == nil {
		t.Error("an empty directory gave no error")
	}
}

// TestReadCRDsOfToolchain: the release's own CRD files parse strictly, all
// six of them (`make unit` builds the toolchain first, cert-manager included).
func TestReadCRDsOfToolchain(t *testing.T) {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := images.CertManagerDir(filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := ReadCRDs(filepath.Join(dir, "crds"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	for _, want := range []string{"certificates.cert-manager.io", "certificaterequests.cert-manager.io", "issuers.cert-manager.io", "clusterissuers.cert-manager.io"} {
		if !slices.Contains(names, want) {
			t.Errorf("CRDs %v lack %s", names, want)
		}
	}
}
