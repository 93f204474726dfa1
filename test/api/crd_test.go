package api

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

func TestPrinterColumns(t *testing.T) {
	want := map[string][]string{
		"etcdclusters":          {"Version", "Replicas", "Ready", "Available", "Age"},
		"etcdmembers":           {"Cluster", "Version", "Running", "Ready", "Age"},
		"etcdsnapshots":         {"Cluster", "Phase", "Verified", "Age"},
		"etcddefrags":           {"Cluster", "Phase", "Defragmented", "Age"},
		"etcdsnapshotschedules": {"Cluster", "Schedule", "Suspend", "Last Schedule", "Last Success", "Next Run", "Age"},
		"etcddefragpolicies":    {"Cluster", "Schedule", "Suspend", "Last Schedule", "Age"},
	}
	for plural, columns := range want {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := k.Get(context.Background(), client.ObjectKey{Name: plural + ".etcd-operator.cozystack.io"}, &crd); err != nil {
			t.Fatal(err)
		}
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s is %s, want Namespaced", plural, crd.Spec.Scope)
		}
		var got []string
		for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, columns) {
			t.Errorf("%s printer columns = %v, want %v", plural, got, columns)
		}
	}
}

// TestExamplesAreAccepted applies every manifest under examples/: they are the
// realistic manifests users copy, so each must be valid as written.
func TestExamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(tools.RepoRoot(), "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	ns := namespace(t)
	kinds := map[string]int{}
	for _, file := range files {
		for _, obj := range readManifests(t, file) {
			obj.SetNamespace(ns)
			if err := k.Create(context.Background(), obj); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(file), obj.GetKind(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	for _, kind := range []string{cluster, snapshot, defrag, schedule, policy} {
		if kinds[kind] == 0 {
			t.Errorf("no example of %s", kind)
		}
	}
}

func readManifests(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}
