package storage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBuildVolume(t *testing.T) {
	class := LocalClass
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "u1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	tests := []struct {
		name, node, wantPath string
		wantLocal            bool
	}{
		{name: "shared: hostPath, no affinity", wantPath: "/v/pvc-u1"},
		{name: "local: pinned to the node", node: "node-2", wantPath: "/v/pvc-u1", wantLocal: true},
	}
	for _, tt := range tests {
		pv := BuildVolume(pvc, "/v", tt.node)
		if pv.Name != "pvc-u1" || VolumePath(pv) != tt.wantPath || pv.Spec.ClaimRef.UID != "u1" {
			t.Errorf("%s: %+v", tt.name, pv)
		}
		if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.String() != "2Gi" {
			t.Errorf("%s: capacity %s", tt.name, got.String())
		}
		if (pv.Spec.Local != nil) != tt.wantLocal || (pv.Spec.NodeAffinity != nil) != tt.wantLocal {
			t.Errorf("%s: local=%v affinity=%v", tt.name, pv.Spec.Local, pv.Spec.NodeAffinity)
		}
		if tt.wantLocal && pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != tt.node {
			t.Errorf("%s: pinned to the wrong node", tt.name)
		}
	}
}
