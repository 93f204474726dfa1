package api

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubectl get etcdcluster shows whether each cluster is Available, from
// the condition the operator writes: the API server's own Table, as kubectl
// asks for it.
func TestClusterTableShowsAvailable(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, cluster, ns, "version: 3.6.16\nreplicas: 3")
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if got := availableCell(t, ns); got != "" {
		t.Errorf("Available of a cluster without conditions = %q, want empty", got)
	}
	patch := []byte(`{"status":{"readyMembers":3,"conditions":[` +
		`{"type":"Progressing","status":"False","reason":"Reconciled","message":"m","lastTransitionTime":"2026-12-07T00:00:00Z"},` +
		`{"type":"Available","status":"True","reason":"QuorumAvailable","message":"m","lastTransitionTime":"2026-12-07T00:00:00Z"}]}}`)
	if err := k.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	if got := availableCell(t, ns); got != "True" {
		t.Errorf("Available = %q, want True", got)
	}
}

// availableCell reads the one cluster of the namespace as a Table and
// returns its Available cell.
func availableCell(t *testing.T, ns string) string {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.GroupVersion = &metav1.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	table := &metav1.Table{}
	err = rc.Get().AbsPath("/apis/etcd-operator.cozystack.io/v1alpha2/namespaces", ns, "etcdclusters").
		SetHeader("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1").Do(context.Background()).Into(table)
	if err != nil {
		t.Fatal(err)
	}
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Available" })
	if col < 0 || len(table.Rows) != 1 {
		t.Fatalf("table: %d rows, columns %+v", len(table.Rows), table.ColumnDefinitions)
	}
	cell, _ := table.Rows[0].Cells[col].(string)
	return cell
}
