package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/prometheus"
)

// TestSandboxPrometheus installs the sandbox's Prometheus add-on (`sandbox
// up --with prometheus`) for the suites' operator: in a Pod of the sandbox,
// with its own ServiceAccount, it must scrape the operator's secure
// endpoint and a member as the chart's monitors say, see the cluster's
// leader through the operator's metrics, and have the chart's alert rules.
func TestSandboxPrometheus(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-prom")
	const name = "prom"
	newCluster(t, ns, name, 1)
	// The release as the suites installed it: watching their namespaces.
	release := prometheus.Release{Name: operatorRelease, Namespace: operatorNS, Values: map[string]any{
		"manager": map[string]any{"watchNamespaces": suiteNamespaces},
	}}
	addr, err := sb.InstallPrometheus(context.Background(), release, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := &prometheusServer{url: addr}
	eventually(t, 3*time.Minute, "the operator and the member scraped", func() (bool, string) {
		var data struct {
			ActiveTargets []struct {
				Labels     map[string]string `json:"labels"`
				ScrapePool string            `json:"scrapePool"`
				Health     string            `json:"health"`
				LastError  string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
			return false, err.Error()
		}
		var operator, member string
		for _, tg := range data.ActiveTargets {
			switch {
			case strings.HasPrefix(tg.ScrapePool, "servicemonitor/"+operatorNS+"/"):
				operator = tg.Health + " " + tg.LastError
			case strings.HasPrefix(tg.ScrapePool, "podmonitor/") && tg.Labels["etcd_cluster"] == name && tg.Labels["etcd_cluster_namespace"] == ns:
				member = tg.Health + " " + tg.LastError
			}
		}
		return operator == "up " && member == "up ", fmt.Sprintf("operator %q, member %q", operator, member)
	})
	eventually(t, time.Minute, "the cluster's leader seen through the operator's metrics", func() (bool, string) {
		v, ok, err := p.value(fmt.Sprintf(`etcd_operator_cluster_has_leader{etcd_cluster_namespace=%q,etcd_cluster=%q}`, ns, name))
		if err != nil {
			return false, err.Error()
		}
		return ok && v == 1, fmt.Sprintf("value %v (present %t)", v, ok)
	})
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &rules); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Name)
		}
	}
	if !strings.Contains(strings.Join(names, " "), "EtcdClusterNoLeader") {
		t.Errorf("Prometheus has the alerts %v, want the chart's (EtcdClusterNoLeader among them)", names)
	}
}
