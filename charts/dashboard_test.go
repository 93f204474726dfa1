package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/internal/metrics"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// dashboard renders the chart with the dashboards on and returns their
// ConfigMap and the per-cluster dashboard's JSON, decoded.
func dashboard(t *testing.T, values map[string]any) (map[string]any, map[string]any) {
	t.Helper()
	return dashboardOf(t, values, "etcd-operator.json")
}

// dashboardOf is dashboard for the ConfigMap's key file.
func dashboardOf(t *testing.T, values map[string]any, file string) (map[string]any, map[string]any) {
	t.Helper()
	objs, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() != "ConfigMap" || !strings.HasSuffix(obj.GetName(), "-dashboard") {
			continue
		}
		data, _ := obj.Object["data"].(map[string]any)
		text, _ := data[file].(string)
		var d map[string]any
		if err := json.Unmarshal([]byte(text), &d); err != nil {
			t.Fatalf("the dashboard is not JSON: %v", err)
		}
		return obj.Object, d
	}
	return nil, nil
}

func TestDashboardIsOffByDefault(t *testing.T) {
	if obj, _ := dashboard(t, nil); obj != nil {
		t.Error("a dashboard ConfigMap rendered by default")
	}
}

// TestDashboardQueriesExist checks every series a panel or variable of the
// dashboard asks for exists: the operator's in its own registry, the
// members' in what a real etcd serves on /metrics. A renamed metric would
// otherwise leave an empty panel that no test sees.
func TestDashboardQueriesExist(t *testing.T) {
	on := map[string]any{"monitoring": map[string]any{"grafanaDashboard": map[string]any{
		"enabled": true, "namespace": "grafana", "annotations": map[string]any{"grafana_folder": "etcd"}}}}
	obj, d := dashboard(t, on)
	if d == nil {
		t.Fatal("no dashboard ConfigMap rendered with monitoring.grafanaDashboard.enabled")
	}
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if meta["namespace"] != "grafana" || labels["grafana_dashboard"] != "1" {
		t.Errorf("the ConfigMap's metadata %v: want namespace grafana and the sidecar's label grafana_dashboard=1", meta)
	}
	known := operatorMetrics(t)
	for name := range etcdMetrics(t) {
		known[name] = true
	}
	_, fleet := dashboardOf(t, on, "etcd-operator-fleet.json")
	if fleet == nil {
		t.Fatal("no fleet dashboard in the ConfigMap")
	}
	exprs := append(queries(d), queries(fleet)...)
	if len(exprs) < 30 {
		t.Fatalf("%d queries in the dashboards, want their panels' and variables'", len(exprs))
	}
	series := regexp.MustCompile(`\betcd_[a-z0-9_]+`)
	// Label names are not series: drop the selectors, the groupings and
	// label_values' second argument before looking.
	notSeries := regexp.MustCompile(`\{[^}]*\}|\bby \([^)]*\)|, *[a-z_]+\)$`)
	for _, e := range exprs {
		for _, name := range series.FindAllString(notSeries.ReplaceAllString(e, ""), -1) {
			if !known[strings.TrimSuffix(name, "_bucket")] {
				t.Errorf("query %q asks for %s, which neither the operator nor etcd serves", e, name)
			}
		}
	}
}

// Both dashboards take several namespaces and clusters at once, rate over
// Grafana's own interval ($__rate_interval: a fixed [5m] shows nothing at a
// scrape interval above 75 s and hides spikes below it), give every
// panel of values a unit, and never draw bytes and seconds on one axis.
func TestDashboardsAreConsistent(t *testing.T) {
	on := map[string]any{"monitoring": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}}
	for _, file := range []string{"etcd-operator.json", "etcd-operator-fleet.json"} {
		_, d := dashboardOf(t, on, file)
		if d == nil {
			t.Fatalf("no %s", file)
		}
		checkVariables(t, file, d)
		checkRates(t, file, d)
		checkPanels(t, file, d)
	}
}

func checkVariables(t *testing.T, file string, d map[string]any) {
	t.Helper()
	tmpl, _ := d["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		v, _ := v.(map[string]any)
		if name := v["name"]; (name == "namespace" || name == "cluster") && (v["multi"] != true || v["includeAll"] != true) {
			t.Errorf("%s: variable %s takes one value at a time", file, name)
		}
	}
}

var rateWindow = regexp.MustCompile(`\brate\([^\[]*\[([^\]]+)\]`)

func checkRates(t *testing.T, file string, d map[string]any) {
	t.Helper()
	for _, e := range queries(d) {
		if strings.Contains(e, `etcd_cluster_namespace="$namespace"`) {
			t.Errorf("%s: %q matches one namespace only", file, e)
		}
		for _, m := range rateWindow.FindAllStringSubmatch(e, -1) {
			if m[1] != "$__rate_interval" {
				t.Errorf("%s: %q rates over [%s], not [$__rate_interval]", file, e, m[1])
			}
		}
	}
}

func checkPanels(t *testing.T, file string, d map[string]any) {
	t.Helper()
	panels, _ := d["panels"].([]any)
	for _, p := range panels {
		p, _ := p.(map[string]any)
		kind, title := p["type"], p["title"]
		fc, _ := p["fieldConfig"].(map[string]any)
		defaults, _ := fc["defaults"].(map[string]any)
		if (kind == "timeseries" || kind == "stat") && defaults["unit"] == nil {
			t.Errorf("%s: panel %q has no unit", file, title)
		}
		exprs := strings.Join(queries(p["targets"]), " ")
		if kind != "table" && strings.Contains(exprs, "_bytes") && strings.Contains(exprs, "_seconds") {
			t.Errorf("%s: panel %q draws bytes and seconds on one axis", file, title)
		}
	}
}

// queries collects every expr and variable query in the dashboard.
func queries(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			if s, ok := val.(string); ok && (k == "expr" || k == "definition") {
				out = append(out, s)
				continue
			}
			out = append(out, queries(val)...)
		}
	case []any:
		for _, val := range v {
			out = append(out, queries(val)...)
		}
	}
	return out
}

// describer keeps what is registered with it, to read the metrics' names
// without series.
type describer struct{ descs []*prometheus.Desc }

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return true }

func operatorMetrics(t *testing.T) map[string]bool {
	d := &describer{}
	metrics.New(d, "test")
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	for _, desc := range d.descs {
		if m := fq.FindStringSubmatch(desc.String()); m != nil {
			out[m[1]] = true
		}
	}
	if !out["etcd_operator_cluster_has_leader"] {
		t.Fatalf("the operator's metrics %v lack cluster_has_leader", out)
	}
	return out
}

// etcdMetrics starts a two-member cluster of the pinned etcd (the peer
// metrics exist only with a peer) and reads the metric families the first
// member serves once it has measured its peer.
func etcdMetrics(t *testing.T) map[string]bool {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	var clients, peers []string
	for range 2 {
		clients, peers = append(clients, "http://"+freePort(t)), append(peers, "http://"+freePort(t))
	}
	initial := "m0=" + peers[0] + ",m1=" + peers[1]
	for i := range 2 {
		cmd := exec.Command(filepath.Join(bin, "etcd"), "--name", fmt.Sprintf("m%d", i), "--data-dir", t.TempDir(),
			"--listen-client-urls", clients[i], "--advertise-client-urls", clients[i], "--listen-peer-urls", peers[i],
			"--initial-advertise-peer-urls", peers[i], "--initial-cluster", initial, "--log-level", "error")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	var out map[string]bool
	// Wait until the first member has measured its peer.
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, err := families(clients[0] + "/metrics")
		out = got
		return err == nil && got["etcd_network_peer_round_trip_time_seconds"], nil
	})
	if err != nil {
		t.Fatalf("etcd's /metrics did not show a measured peer within a minute (%d families): %v", len(out), err)
	}
	for _, want := range []string{"etcd_server_has_leader", "etcd_mvcc_db_total_size_in_bytes"} {
		if !out[want] {
			t.Fatalf("etcd serves %d families without %s", len(out), want)
		}
	}
	return out
}

// families reads the names of the metric families a /metrics serves.
func families(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = true
		}
	}
	return out, nil
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return fmt.Sprintf("127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
}
