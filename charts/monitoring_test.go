package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// monitoringObjects renders the chart and returns its Prometheus Operator
// objects by kind.
func monitoringObjects(t *testing.T, values map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		if obj.GetAPIVersion() == "monitoring.coreos.com/v1" {
			out[obj.GetKind()] = obj
		}
	}
	return out
}

func allMonitoring(extra map[string]any) map[string]any {
	on := map[string]any{"enabled": true}
	v := map[string]any{"monitoring": map[string]any{"serviceMonitor": on, "podMonitor": on, "prometheusRule": on}}
	for k, val := range extra {
		v[k] = val
	}
	return v
}

func TestMonitoringIsOffByDefault(t *testing.T) {
	if got := monitoringObjects(t, nil); len(got) != 0 {
		t.Errorf("rendered %d monitoring objects by default, want none (their CRDs may not exist)", len(got))
	}
}

func TestMonitorsScrapeTheOperatorAndTheMembers(t *testing.T) {
	objs := monitoringObjects(t, allMonitoring(nil))
	sm, pm := objs["ServiceMonitor"], objs["PodMonitor"]
	if sm == nil || pm == nil || objs["PrometheusRule"] == nil {
		t.Fatalf("rendered %v, want a ServiceMonitor, a PodMonitor and a PrometheusRule", objs)
	}
	ep, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(ep) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", ep)
	}
	e := ep[0].(map[string]any)
	if e["port"] != "https-metrics" || e["scheme"] != "https" || e["bearerTokenFile"] == nil {
		t.Errorf("the secure metrics are scraped as %v, want https-metrics over https with a bearer token", e)
	}
	plain := monitoringObjects(t, allMonitoring(map[string]any{"metrics": map[string]any{"secure": false}}))["ServiceMonitor"]
	ep, _, _ = unstructured.NestedSlice(plain.Object, "spec", "endpoints")
	if e := ep[0].(map[string]any); e["port"] != "http-metrics" || e["scheme"] != "http" || e["bearerTokenFile"] != nil {
		t.Errorf("plain metrics are scraped as %v", e)
	}
	// The ServiceMonitor's port is the metrics Service's.
	svcPorts := servicePortNames(t)
	if !strings.Contains(svcPorts, "https-metrics") {
		t.Errorf("the metrics Service's ports are %s, the ServiceMonitor scrapes https-metrics", svcPorts)
	}
	exprs, _, _ := unstructured.NestedSlice(pm.Object, "spec", "selector", "matchExpressions")
	if len(exprs) != 1 || exprs[0].(map[string]any)["key"] != "etcd-operator.cozystack.io/role" {
		t.Errorf("the PodMonitor selects %v; want member Pods only (they carry the role label; the snapshot Jobs do not)", exprs)
	}
	if any, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !any {
		t.Error("watching every namespace, the PodMonitor does not look in every namespace")
	}
	scoped := monitoringObjects(t, allMonitoring(map[string]any{"manager": map[string]any{"watchNamespaces": []any{"a", "b"}}}))["PodMonitor"]
	if names, _, _ := unstructured.NestedStringSlice(scoped.Object, "spec", "namespaceSelector", "matchNames"); strings.Join(names, ",") != "a,b" {
		t.Errorf("watching a and b, the PodMonitor looks in %v", names)
	}
}

func servicePortNames(t *testing.T) string {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, obj := range objs {
		if obj.GetKind() == "Service" && strings.HasSuffix(obj.GetName(), "-metrics") {
			ports, _, _ := unstructured.NestedSlice(obj.Object, "spec", "ports")
			for _, p := range ports {
				names = append(names, p.(map[string]any)["name"].(string))
			}
		}
	}
	return strings.Join(names, ",")
}

// ruleFile writes the rendered PrometheusRule's spec as a Prometheus rule
// file and returns its path.
func ruleFile(t *testing.T, values map[string]any) string {
	t.Helper()
	rule := monitoringObjects(t, allMonitoring(values))["PrometheusRule"]
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"MEMBER_NOT_READY_FOR", "RECONCILE_ERRORS_FOR", "DATABASE_QUOTA_RATIO", "SNAPSHOT_MAX_AGE_SECONDS", "CERTIFICATE_EXPIRY_WARNING_SECONDS"} {
		if strings.Contains(string(data), word) {
			t.Errorf("the rendered rules still hold %s", word)
		}
	}
	path := filepath.Join(t.TempDir(), "alerts.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAlertRules runs Prometheus's own rule tests (testdata/alerts_test.yaml:
// series in, alerts expected out) against the rules the chart renders.
func TestAlertRules(t *testing.T) {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	rules := ruleFile(t, nil)
	promtool := filepath.Join(bin, "promtool")
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(filepath.Dir(rules), "alerts_test.yaml")
	if err := os.WriteFile(testFile, tests, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestValuesSchema checks that values.schema.json refuses a misspelt or
// mistyped value before anything is installed, and takes the defaults.
func TestValuesSchema(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"misspelt key":     {"metric": map[string]any{"port": 9090}},
		"port as a string": {"metrics": map[string]any{"port": "https"}},
		"unknown level":    {"manager": map[string]any{"logLevel": "verbose"}},
		"bad interval":     {"monitoring": map[string]any{"podMonitor": map[string]any{"interval": "soon"}}},
		"ratio above one":  {"monitoring": map[string]any{"prometheusRule": map[string]any{"databaseQuotaRatio": 1.5}}},
	} {
		if _, err := tools.RenderChart("eo", "ops", values); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: rendered (%v), want the values schema to refuse it", name, err)
		}
	}
}
