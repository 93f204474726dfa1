package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// operatorMetricsURL is the main operator's secure metrics endpoint, at its
// Pod's address.
func operatorMetricsURL(t *testing.T) string {
	t.Helper()
	list, err := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("operator pod: %v (%d found)", err, len(list.Items))
	}
	return "https://" + list.Items[0].Status.PodIP + ":8443/metrics"
}

// scraperToken returns a token of a ServiceAccount of operatorNS, bound to
// the chart's metrics-reader ClusterRole when reader is true.
func scraperToken(t *testing.T, name string, reader bool) string {
	t.Helper()
	if out, err := kubectl("-n", operatorNS, "create", "serviceaccount", name); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("kubectl create serviceaccount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = kubectl("-n", operatorNS, "delete", "serviceaccount", name, "--ignore-not-found")
		_, _ = kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")
	})
	if reader {
		out, err := kubectl("create", "clusterrolebinding", name, "--clusterrole", operatorRelease+"-etcd-operator-metrics-reader",
			"--serviceaccount", operatorNS+":"+name)
		if err != nil && !strings.Contains(out, "AlreadyExists") {
			t.Fatalf("kubectl create clusterrolebinding: %v\n%s", err, out)
		}
	}
	out, err := kubectl("-n", operatorNS, "create", "token", name, "--duration", "1h")
	if err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, out)
	}
	return strings.TrimSpace(out)
}

// getMetrics asks the endpoint with the token (none when empty); the
// operator's certificate is its own, self-signed.
func getMetrics(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the operator's self-signed serving certificate
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestMetricsServedSecurely scrapes the operator's metrics as Prometheus
// would: over HTTPS, answered only with a token the API server vouches for
// whose ServiceAccount may get /metrics (the chart's metrics-reader role).
func TestMetricsServedSecurely(t *testing.T) {
	t.Parallel()
	url := operatorMetricsURL(t)
	if code, body := getMetrics(t, url, ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401\n%.300s", code, body)
	}
	stranger := scraperToken(t, "e2e-metrics-stranger", false)
	eventually(t, time.Minute, "a token without the reader role refused", func() (bool, string) {
		code, body := getMetrics(t, url, stranger)
		return code == http.StatusForbidden, fmt.Sprintf("%d %.200s", code, body)
	})
	reader := scraperToken(t, "e2e-metrics-reader", true)
	eventually(t, time.Minute, "the reader's token answered with the operator's metrics", func() (bool, string) {
		code, body := getMetrics(t, url, reader)
		return code == http.StatusOK && strings.Contains(body, "etcd_operator_build_info{") &&
			strings.Contains(body, "controller_runtime_reconcile_total{"), fmt.Sprintf("%d %.200s", code, body)
	})
}
