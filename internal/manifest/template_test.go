package manifest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// TestTemplateHashIsStable pins the hash of a member that sets every rolled
// field. The hash is recorded on running Pods: if a change to the code (not
// to the member) changed it, upgrading the operator would restart every
// member of every cluster. Change the expected value only together with a
// deliberate, documented roll-out.
func TestTemplateHashIsStable(t *testing.T) {
	m := &v1alpha2.EtcdMember{}
	m.Spec.Version = "3.6.16"
	m.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
	m.Spec.Options = &v1alpha2.EtcdOptions{SnapshotCount: ptr.To[int64](5000)}
	m.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	m.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}
	m.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	m.Spec.AdditionalMetadata = &v1alpha2.AdditionalMetadata{Labels: map[string]string{"team": "a"}}
	m.Annotations = map[string]string{AnnotationSnapshotCount: "1"}
	const want = "0b492336c9"
	if got := TemplateHash(m); got != want {
		t.Errorf("TemplateHash = %s, want %s: the hash of an unchanged member changed, which rolls every member on upgrade", got, want)
	}
}
