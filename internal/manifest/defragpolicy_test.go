package manifest

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestDefragRun(t *testing.T) {
	p := &v1alpha2.EtcdDefragPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "policy-uid"},
		Spec: v1alpha2.EtcdDefragPolicySpec{
			ClusterRef:              corev1.LocalObjectReference{Name: "db"},
			Rule:                    &v1alpha2.DefragRule{QuotaUsageAbove: "80%", MinReclaim: ptr.To(resource.MustParse("32Mi"))},
			TTLSecondsAfterFinished: ptr.To[int32](600),
		},
	}
	tick := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	d := DefragRun(p, tick)
	// The policy changes after the run was made: the run keeps its copy.
	p.Spec.Rule.QuotaUsageAbove = "90%"
	*p.Spec.TTLSecondsAfterFinished = 1
	ref := metav1.GetControllerOf(d)
	for _, c := range []struct{ what, got, want string }{
		{"name", d.Name, "nightly-1796094000"},
		{"namespace", d.Namespace, "ns"},
		{"policy label", d.Labels[LabelDefragPolicy], "nightly"},
		{"cluster label", d.Labels[LabelCluster], "db"},
		{"owner", string(ref.UID) + " " + ref.Kind, "policy-uid EtcdDefragPolicy"},
		{"cluster", d.Spec.ClusterRef.Name, "db"},
		{"rule copied", d.Spec.Rule.QuotaUsageAbove, "80%"},
		{"minReclaim copied", d.Spec.Rule.MinReclaim.String(), "32Mi"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if ptr.Deref(d.Spec.TTLSecondsAfterFinished, 0) != 600 {
		t.Errorf("ttl %v, want a copy of 600", d.Spec.TTLSecondsAfterFinished)
	}
	p.Spec.Rule, p.Spec.TTLSecondsAfterFinished = nil, nil
	if d := DefragRun(p, tick); d.Spec.Rule != nil || d.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("unset rule and TTL stay unset: %+v", d.Spec)
	}
}
