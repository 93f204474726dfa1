package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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

// With metrics.certManager, cert-manager issues the metrics' certificate for
// the Service's names, the operator serves it from its mounted Secret, and
// the ServiceMonitor verifies it against that Secret's CA and the Service's
// name, instead of skipping verification.
func TestMetricsCertificateFromCertManager(t *testing.T) {
	values := allMonitoring(map[string]any{"metrics": map[string]any{"certManager": map[string]any{
		"enabled": true, "issuerRef": map[string]any{"name": "ca", "kind": "ClusterIssuer"}}}})
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	var cert, sm, deploy *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Certificate":
			cert = o
		case "ServiceMonitor":
			sm = o
		case "Deployment":
			deploy = o
		}
	}
	if cert == nil || sm == nil || deploy == nil {
		t.Fatalf("rendered Certificate %v, ServiceMonitor %v, Deployment %v", cert != nil, sm != nil, deploy != nil)
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	kind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	if !slices.Contains(dns, "eo-etcd-operator-metrics.ops.svc") || secret != "eo-etcd-operator-metrics-tls" || kind != "ClusterIssuer" {
		t.Errorf("Certificate: dnsNames %v, secret %s, issuer kind %s", dns, secret, kind)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	tlsConfig, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
	if tlsConfig["insecureSkipVerify"] != nil || tlsConfig["serverName"] != "eo-etcd-operator-metrics.ops.svc" {
		t.Errorf("ServiceMonitor tlsConfig %v: want verification against the Service's name", tlsConfig)
	}
	if ca, _, _ := unstructured.NestedString(tlsConfig, "ca", "secret", "name"); ca != secret {
		t.Errorf("ServiceMonitor trusts the CA of %q, want %q", ca, secret)
	}
	var d appsv1.Deployment
	fromUnstructured(t, deploy, &d)
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--metrics-cert-dir=/etc/etcd-operator/metrics-tls") || len(c.VolumeMounts) != 1 ||
		c.VolumeMounts[0].MountPath != "/etc/etcd-operator/metrics-tls" || len(d.Spec.Template.Spec.Volumes) != 1 ||
		d.Spec.Template.Spec.Volumes[0].Secret == nil || d.Spec.Template.Spec.Volumes[0].Secret.SecretName != secret {
		t.Errorf("the manager does not serve the Secret: args %v, mounts %v, volumes %v", c.Args, c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}
	for name, bad := range map[string]map[string]any{
		"no issuer":  {"certManager": map[string]any{"enabled": true}},
		"plain HTTP": {"secure": false, "certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "ca"}}},
	} {
		if _, err := tools.RenderChart("eo", "ops", map[string]any{"metrics": bad}); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
	// By default nothing changes: the operator's own certificate, not verified.
	objs, _ = tools.RenderChart("eo", "ops", allMonitoring(nil))
	for _, o := range objs {
		if o.GetKind() == "Certificate" {
			t.Error("a Certificate rendered by default")
		}
	}
}
