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
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/promconfig"
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
	cfg, err := promconfig.Translate(objects, promconfig.Options{
		KubeconfigFile: kubeconfigPath, TokenFile: tokenFile, RuleFile: filepath.Join(dir, "rules.yaml"), Interval: "5s",
	})
	if err != nil {
		t.Fatalf("the chart's monitors: %v", err)
	}
	if len(cfg.Jobs) != 2 || cfg.Rules == nil {
		t.Fatalf("the chart rendered jobs %v and rules %t, want a ServiceMonitor, a PodMonitor and a PrometheusRule", cfg.Jobs, cfg.Rules != nil)
	}
	for name, data := range map[string][]byte{"prometheus.yaml": cfg.Prometheus, "rules.yaml": cfg.Rules} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

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
