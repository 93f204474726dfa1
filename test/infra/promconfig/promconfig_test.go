package promconfig

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// job is the part of a scrape job the test reads back.
type job struct {
	JobName string `json:"job_name"`
	Scheme  string `json:"scheme"`
	SD      []struct {
		Role       string `json:"role"`
		Namespaces struct {
			Names []string `json:"names"`
		} `json:"namespaces"`
	} `json:"kubernetes_sd_configs"`
	Relabel []struct {
		Source []string `json:"source_labels"`
		Regex  string   `json:"regex"`
		Action string   `json:"action"`
	} `json:"relabel_configs"`
	Authorization struct {
		CredentialsFile string `json:"credentials_file"`
	} `json:"authorization"`
}

// keeps is what the job's keep rules require: source label → regex.
func (j job) keeps() map[string]string {
	out := map[string]string{}
	for _, r := range j.Relabel {
		if r.Action == "keep" {
			out[r.Source[0]] = r.Regex
		}
	}
	return out
}

// TestTheChartsMonitorsMakeAValidConfig renders the chart with its monitors
// on, translates them, and has the toolchain's promtool check the result;
// then reads back the jobs' discovery, selectors, ports and credentials.
func TestTheChartsMonitorsMakeAValidConfig(t *testing.T) {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, watch := range [][]string{nil, {"team-a", "team-b"}} {
		operator, members, token := translateChart(t, bin, watch)
		if operator.Scheme != "https" || operator.Authorization.CredentialsFile != token || operator.SD[0].Role != "endpointslice" ||
			strings.Join(operator.SD[0].Namespaces.Names, ",") != "ops" {
			t.Errorf("the operator's job %+v: want https with the scraper's token over the release namespace's EndpointSlices", operator)
		}
		if port := operator.keeps()["__meta_kubernetes_endpointslice_port_name"]; port != "https-metrics" {
			t.Errorf("the operator's job keeps port %q, want https-metrics", port)
		}
		if members.SD[0].Role != "pod" || !slices.Equal(members.SD[0].Namespaces.Names, watch) {
			t.Errorf("the members' job discovers %+v, want Pods in %v (all namespaces when none)", members.SD, watch)
		}
		keeps := members.keeps()
		if keeps["__meta_kubernetes_pod_container_port_name"] != "metrics" || keeps["__meta_kubernetes_pod_labelpresent_etcd_operator_cozystack_io_role"] != "true" {
			t.Errorf("the members' job keeps %v", keeps)
		}
	}
}

// translateChart renders the chart (release eo in ops, watching watch) with
// every monitor on, translates it, checks the result with promtool, and
// returns the operator's and the members' jobs and the token file named.
func translateChart(t *testing.T, bin string, watch []string) (operator, members job, token string) {
	t.Helper()
	values := map[string]any{"monitoring": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "podMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	}}
	if watch != nil {
		values["manager"] = map[string]any{"watchNamespaces": watch}
	}
	objects, err := tools.RenderChart("eo", "ops", values)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token = filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Translate(objects, Options{TokenFile: token, RuleFile: filepath.Join(dir, "rules.yaml"), Interval: "5s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"podmonitor/ops/eo-etcd-operator-members", "servicemonitor/ops/eo-etcd-operator"}; !slices.Equal(slices.Sorted(slices.Values(cfg.Jobs)), want) {
		t.Fatalf("jobs %v, want %v", cfg.Jobs, want)
	}
	for name, data := range map[string][]byte{"prometheus.yaml": cfg.Prometheus, "rules.yaml": cfg.Rules} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(filepath.Join(bin, "promtool"), "check", "config", filepath.Join(dir, "prometheus.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, cfg.Prometheus)
	}
	var parsed struct {
		ScrapeConfigs []job `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(cfg.Prometheus, &parsed); err != nil {
		t.Fatal(err)
	}
	for _, j := range parsed.ScrapeConfigs {
		if strings.HasPrefix(j.JobName, "podmonitor/") {
			members = j
		} else {
			operator = j
		}
	}
	return operator, members, token
}
