package prometheus

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// TestObjectsScrapeTheRelease renders the chart as the add-on does and
// checks what it would install: the binding to the release's
// metrics-reader role, the configuration of both monitors with the Pod's
// own token, and a template that rolls when the configuration changes.
func TestObjectsScrapeTheRelease(t *testing.T) {
	role, config, hash := installed(t, Release{Name: "etcd-operator", Namespace: "etcd-operator-system"})
	if role != "etcd-operator-metrics-reader" {
		t.Errorf("Prometheus is bound to %q, want the release's etcd-operator-metrics-reader", role)
	}
	for _, want := range []string{
		"job_name: servicemonitor/etcd-operator-system/etcd-operator\n",
		"job_name: podmonitor/etcd-operator-system/etcd-operator-members\n",
		"credentials_file: " + tokenFile + "\n",
		"- " + configDir + "/rules.yaml\n",
	} {
		if !strings.Contains(config, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, config)
		}
	}
	if strings.Contains(config, "kubeconfig_file") {
		t.Errorf("in a Pod, discovery uses the Pod's ServiceAccount, not a kubeconfig:\n%s", config)
	}
	scoped := Release{Name: "etcd-operator", Namespace: "etcd-operator-system", Values: map[string]any{
		"manager": map[string]any{"watchNamespaces": []string{"team-a"}},
	}}
	if _, config2, hash2 := installed(t, scoped); hash2 == hash || !strings.Contains(config2, "- team-a\n") {
		t.Errorf("watching team-a alone: hash %s (was %s), configuration:\n%s", hash2, hash, config2)
	}
}

// installed renders the chart for r as the add-on does, and returns the
// ClusterRole Prometheus is bound to for the operator's metrics, its
// configuration and the template's configuration hash.
func installed(t *testing.T, r Release) (role, config, hash string) {
	t.Helper()
	rendered, err := tools.RenderChart(r.Name, r.Namespace, MonitoringValues(r))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(rendered, "quay.io/prometheus/prometheus:test")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			if o.Name == "sandbox-prometheus-metrics-reader" {
				role = o.RoleRef.Name
			}
		case *corev1.ConfigMap:
			config = o.Data["prometheus.yaml"]
		case *appsv1.Deployment:
			hash = o.Spec.Template.Annotations["sandbox.etcd-operator.cozystack.io/config"]
		}
	}
	return role, config, hash
}
