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

// Placement reaches the Pod, and a change of any placement field changes
// the hash (so it rolls out, one member at a time), while a member that
// sets none keeps the hash it had before the fields existed.
func TestPlacement(t *testing.T) {
	base := &v1alpha2.EtcdMember{}
	base.Spec.Version = "3.6.16"
	before := TemplateHash(base)
	place := func(m *v1alpha2.EtcdMember) {
		m.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		m.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		m.Spec.PriorityClassName = "system-cluster-critical"
		m.Spec.RuntimeClassName = ptr.To("gvisor")
		m.Spec.SchedulerName = "etcd-scheduler"
	}
	m := base.DeepCopy()
	place(m)
	pod := Pod(m, PodOptions{OperatorImage: "op:1"})
	s := pod.Spec
	if len(s.Tolerations) != 1 || s.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || len(s.NodeSelector) != 1 ||
		s.PriorityClassName != "system-cluster-critical" || s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" || s.SchedulerName != "etcd-scheduler" {
		t.Errorf("the Pod does not carry the placement: %+v", s)
	}
	for name, change := range map[string]func(*v1alpha2.EtcdMember){
		"tolerations":       func(m *v1alpha2.EtcdMember) { m.Spec.Tolerations = nil },
		"nodeSelector":      func(m *v1alpha2.EtcdMember) { m.Spec.NodeSelector = map[string]string{"pool": "etcd"} },
		"priorityClassName": func(m *v1alpha2.EtcdMember) { m.Spec.PriorityClassName = "" },
		"runtimeClassName":  func(m *v1alpha2.EtcdMember) { m.Spec.RuntimeClassName = nil },
		"schedulerName":     func(m *v1alpha2.EtcdMember) { m.Spec.SchedulerName = "other" },
	} {
		c := m.DeepCopy()
		change(c)
		if TemplateHash(c) == TemplateHash(m) {
			t.Errorf("changing %s leaves the template hash as it is: it would not roll out", name)
		}
	}
	// Empty collections are no placement at all.
	empty := base.DeepCopy()
	empty.Spec.Tolerations, empty.Spec.NodeSelector = []corev1.Toleration{}, map[string]string{}
	if TemplateHash(empty) != before {
		t.Errorf("empty tolerations and node selector change the hash")
	}
}

// The hash of a member with placement is pinned too (see
// TestTemplateHashIsStable).
func TestPlacementHashIsStable(t *testing.T) {
	m := &v1alpha2.EtcdMember{}
	m.Spec.Version = "3.6.16"
	m.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "etcd", Effect: corev1.TaintEffectNoSchedule}}
	m.Spec.NodeSelector = map[string]string{"pool": "etcd"}
	m.Spec.PriorityClassName = "etcd-critical"
	m.Spec.RuntimeClassName = ptr.To("runc")
	m.Spec.SchedulerName = "default-scheduler"
	const want = "5d64a46041"
	if got := TemplateHash(m); got != want {
		t.Errorf("TemplateHash = %s, want %s: the hash of an unchanged member changed, which rolls every member on upgrade", got, want)
	}
}
