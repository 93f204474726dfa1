package manifest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// Members spread over nodes and zones by default, softly; what the user
// sets of their own replaces the default of its kind; and the defaults
// stay out of the member's spec, so out of the template hash (an operator
// upgrade restarts nothing).
func TestMembersSpreadByDefault(t *testing.T) {
	m := member()
	pod := Pod(m, PodOptions{})
	a := pod.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("default anti-affinity: %+v", a)
	}
	term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != LabelHostname || !equality.Semantic.DeepEqual(term.LabelSelector.MatchLabels, ClusterSelector(m.Spec.ClusterName)) {
		t.Errorf("anti-affinity term: %+v", term)
	}
	sc := pod.Spec.TopologySpreadConstraints
	if len(sc) != 1 || sc[0].TopologyKey != LabelZone || sc[0].WhenUnsatisfiable != corev1.ScheduleAnyway || sc[0].MaxSkew != 1 {
		t.Errorf("default spread: %+v", sc)
	}
	if m.Spec.Affinity != nil || m.Spec.TopologySpreadConstraints != nil {
		t.Error("the defaults were written into the member's spec")
	}

	nodeOnly := member(func(m *v1alpha2.EtcdMember) {
		m.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "etcd", Operator: corev1.NodeSelectorOpExists}}}},
		}}}
	})
	if a := Pod(nodeOnly, PodOptions{}).Spec.Affinity; a.NodeAffinity == nil || a.PodAntiAffinity == nil || nodeOnly.Spec.Affinity.PodAntiAffinity != nil {
		t.Errorf("a node affinity of the user's lost the default anti-affinity, or kept it out: %+v", a)
	}
	own := &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}, TopologyKey: LabelHostname,
	}}}
	ownSpread := []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
	custom := member(func(m *v1alpha2.EtcdMember) {
		m.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: own}
		m.Spec.TopologySpreadConstraints = ownSpread
	})
	p := Pod(custom, PodOptions{})
	if !equality.Semantic.DeepEqual(p.Spec.Affinity.PodAntiAffinity, own) || !equality.Semantic.DeepEqual(p.Spec.TopologySpreadConstraints, ownSpread) {
		t.Errorf("the user's own spreading was not kept as given: %+v %+v", p.Spec.Affinity, p.Spec.TopologySpreadConstraints)
	}
	// The hash is of the member's spec, which the defaults never enter
	// (checked above); template_test.go pins its value.
}
