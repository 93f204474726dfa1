package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// prometheusServer is a real Prometheus (the toolchain's build) run on the
// host beside a suite. It is configured from the chart itself: the
// ServiceMonitor, PodMonitor and PrometheusRule the chart renders with
// monitoring on are turned into scrape jobs and a rule file the way the
// Prometheus Operator turns them (for the fields the chart uses), so a wrong
// port name, selector or relabeling in the chart fails the suite.
type prometheusServer struct {
	url string
}

// startPrometheus runs Prometheus for the suite of namespace ns: the
// chart's PodMonitor over that namespace's members, its ServiceMonitor over
// the main operator (with the token of a ServiceAccount bound to the chart's
// metrics-reader role, as Prometheus's own would be), its alert rules, and
// scrapes and evaluations every 5 seconds.
func startPrometheus(t *testing.T, ns string) *prometheusServer {
	t.Helper()
	objects := renderMonitoring(t, ns)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(scraperToken(t, "prometheus-"+ns, true)), 0o600); err != nil {
		t.Fatal(err)
	}
	var jobs []any
	for _, o := range objects {
		switch o.GetKind() {
		case "ServiceMonitor":
			jobs = append(jobs, monitorJob(t, o, "endpointslice", tokenFile))
		case "PodMonitor":
			jobs = append(jobs, monitorJob(t, o, "pod", tokenFile))
		case "PrometheusRule":
			spec, _, _ := unstructured.NestedMap(o.Object, "spec")
			writeYAML(t, filepath.Join(dir, "rules.yaml"), spec)
		}
	}
	if len(jobs) != 2 {
		t.Fatalf("the chart rendered %d monitors, want a ServiceMonitor and a PodMonitor", len(jobs))
	}
	writeYAML(t, filepath.Join(dir, "prometheus.yaml"), map[string]any{
		"global":         map[string]any{"scrape_interval": "5s", "evaluation_interval": "5s"},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": jobs,
	})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(filepath.Join(bin, "prometheus"), "--config.file="+filepath.Join(dir, "prometheus.yaml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("context: Prometheus said:\n%s", logs.String())
		}
	})
	p := &prometheusServer{url: "http://" + addr}
	eventually(t, time.Minute, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// renderMonitoring renders the chart's monitoring objects for the main
// operator's release, its PodMonitor over ns alone.
func renderMonitoring(t *testing.T, ns string) []*unstructured.Unstructured {
	t.Helper()
	// Offline, helm knows no cluster's version: the one the suites run.
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"template", operatorRelease, chartPath(), "--namespace", operatorNS, "--kube-version", v.GitVersion,
		"--show-only", "templates/monitoring.yaml",
		"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "manager.watchNamespaces[0]=" + ns,
		"--set", "monitoring.serviceMonitor.interval=5s", "--set", "monitoring.podMonitor.interval=5s"}
	out, err := exec.Command(filepath.Join(bin, "helm"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var objects []*unstructured.Unstructured
	for doc := range strings.SplitSeq(string(out), "\n---") {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			t.Fatalf("the chart's monitoring objects: %v", err)
		}
		if o.Object != nil {
			objects = append(objects, o)
		}
	}
	return objects
}

// notInLabelName is what a service discovery meta label name cannot hold.
var notInLabelName = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// labelName is a Kubernetes label as a service discovery meta label names
// it.
func labelName(l string) string { return notInLabelName.ReplaceAllString(l, "_") }

// monitorJob is the scrape job of a ServiceMonitor (role endpointslice) or
// PodMonitor (role pod): its selector, namespaces and first endpoint.
func monitorJob(t *testing.T, o *unstructured.Unstructured, role, tokenFile string) map[string]any {
	t.Helper()
	meta := "__meta_kubernetes_pod_label"
	portLabel := "__meta_kubernetes_pod_container_port_name"
	endpointsField := "podMetricsEndpoints"
	if role == "endpointslice" {
		meta, portLabel, endpointsField = "__meta_kubernetes_service_label", "__meta_kubernetes_endpointslice_port_name", "endpoints"
	}
	var relabel []any
	keep := func(label, regex string) {
		relabel = append(relabel, map[string]any{"source_labels": []string{label}, "regex": regex, "action": "keep"})
	}
	matchLabels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
	for k, v := range matchLabels {
		keep(meta+"_"+labelName(k), regexp.QuoteMeta(v))
	}
	exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "selector", "matchExpressions")
	for _, e := range exprs {
		e := e.(map[string]any)
		if e["operator"] != "Exists" {
			t.Fatalf("%s: selector operator %v is not translated here", o.GetName(), e["operator"])
		}
		keep(strings.Replace(meta, "_label", "_labelpresent", 1)+"_"+labelName(e["key"].(string)), "true")
	}
	endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", endpointsField)
	if len(endpoints) != 1 {
		t.Fatalf("%s: %d endpoints, want 1", o.GetName(), len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	keep(portLabel, regexp.QuoteMeta(ep["port"].(string)))
	for _, r := range asSlice(ep["relabelings"]) {
		r := r.(map[string]any)
		relabel = append(relabel, map[string]any{"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]})
	}
	namespaces, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames")
	job := map[string]any{
		"job_name":        strings.ToLower(o.GetKind()) + "/" + o.GetNamespace() + "/" + o.GetName(),
		"scrape_interval": ep["interval"], "metrics_path": ep["path"], "scheme": orDefault(ep["scheme"], "http"),
		"kubernetes_sd_configs": []any{map[string]any{"role": role, "kubeconfig_file": kubeconfigPath,
			"namespaces": map[string]any{"names": namespaces}}},
		"relabel_configs": relabel,
	}
	if ep["bearerTokenFile"] != nil {
		// The Pod's own token in the cluster; here the scraper's.
		job["authorization"] = map[string]any{"credentials_file": tokenFile}
	}
	if skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify"); skip {
		job["tls_config"] = map[string]any{"insecure_skip_verify": true}
	}
	return job
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func orDefault(v any, d string) any {
	if v == nil {
		return d
	}
	return v
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// get asks Prometheus's HTTP API and decodes its data.
func (p *prometheusServer) get(path string, query url.Values, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

// value is the first sample of an instant query, and whether there is one.
func (p *prometheusServer) value(expr string) (float64, bool, error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, false, err
	}
	if len(data.Result) == 0 {
		return 0, false, nil
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil, err
}

// alertState is the state of the alert of a cluster ("pending", "firing",
// or "" when Prometheus has none).
func (p *prometheusServer) alertState(alert, ns, cluster string) (string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return "", err
	}
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == alert && a.Labels["etcd_cluster_namespace"] == ns && a.Labels["etcd_cluster"] == cluster {
			return a.State, nil
		}
	}
	return "", nil
}

// waitAlert waits until the alert of the cluster is in state ("" for
// none).
func (p *prometheusServer) waitAlert(t *testing.T, alert, ns, cluster, state string, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("alert %s of %s/%s %q", alert, ns, cluster, state), func() (bool, string) {
		got, err := p.alertState(alert, ns, cluster)
		if err != nil {
			return false, err.Error()
		}
		return got == state, fmt.Sprintf("state %q", got)
	})
}
