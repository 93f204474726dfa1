package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRequestOfNamesVerbAndResource(t *testing.T) {
	tests := []struct {
		method, url, verb, resource string
	}{
		{"GET", "/api/v1/namespaces/prod/secrets/db-root", "get", "secrets"},
		{"GET", "/api/v1/namespaces/prod/pods?labelSelector=a%3Db&limit=500", "list", "pods"},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", "watch", "pods"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/etcd-operator-system/leases/aa20b3a9.etcd-operator.cozystack.io", "get", "leases"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/etcd-operator-system/leases/x", "update", "leases"},
		{"PATCH", "/apis/etcd-operator.cozystack.io/v1alpha2/namespaces/prod/etcdclusters/db/status", "patch", "etcdclusters/status"},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", "create", "tokenreviews"},
		{"DELETE", "/api/v1/namespaces/prod/pods/db-abc", "delete", "pods"},
		{"DELETE", "/api/v1/namespaces/prod/pods", "deletecollection", "pods"},
		{"GET", "/api/v1/namespaces/prod", "get", "namespaces"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"PUT", "/api/v1/namespaces/prod/finalize", "update", "namespaces/finalize"},
		{"GET", "/apis/cert-manager.io/v1", "get", "discovery"},
		{"GET", "/apis", "get", "discovery"},
		{"GET", "/api", "get", "discovery"},
		{"GET", "/version", "get", "discovery"},
		{"GET", "/healthz", "get", "other"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.url, nil)
		verb, resource := requestOf(req)
		if verb != tt.verb || resource != tt.resource {
			t.Errorf("%s %s: %s %s, want %s %s", tt.method, tt.url, verb, resource, tt.verb, tt.resource)
		}
	}
}

// TestTransportCountsEveryRequest sends requests through the wrapped
// transport to a server and reads the counter back.
func TestTransportCountsEveryRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	r := NewRequests(prometheus.NewRegistry())
	c := &http.Client{Transport: r.Transport(http.DefaultTransport)}
	for _, path := range []string{"/api/v1/namespaces/a/secrets/s", "/api/v1/namespaces/b/secrets/t", "/api/v1/namespaces/a/pods"} {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if got := testutil.ToFloat64(r.all.WithLabelValues("get", "secrets")); got != 2 {
		t.Errorf("get secrets counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.all.WithLabelValues("list", "pods")); got != 1 {
		t.Errorf("list pods counted %v, want 1", got)
	}
}
