package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// TestTheCacheKeepsNoManagedFields: objects reach the cache without their
// managedFields, whichever kind, and the scoped kinds keep their selector.
func TestTheCacheKeepsNoManagedFields(t *testing.T) {
	o := cacheOptions("")
	if o.DefaultTransform == nil {
		t.Fatal("no default transform")
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &v1alpha2.EtcdMember{}, &v1alpha2.EtcdCluster{}} {
		obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "etcd-operator", Operation: metav1.ManagedFieldsOperationUpdate}})
		obj.SetLabels(map[string]string{"kept": "yes"})
		out, err := o.DefaultTransform(obj)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(client.Object)
		if got.GetManagedFields() != nil {
			t.Errorf("%T kept its managedFields", obj)
		}
		if got.GetLabels()["kept"] != "yes" {
			t.Errorf("%T lost its labels", obj)
		}
	}
	for obj, by := range o.ByObject {
		if _, pod := obj.(*corev1.Pod); pod && by.Label == nil {
			t.Error("Pods are cached without the operator's label selector")
		}
	}
}
