package manifest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// The survivor's mark reaches a Pod only behind the cluster's record of a
// recovery forcing a new cluster from that member, with that token.
func TestForceAuthorized(t *testing.T) {
	forcing := func(phase, survivor, token string) *v1alpha2.EtcdCluster {
		return &v1alpha2.EtcdCluster{Status: v1alpha2.EtcdClusterStatus{Recovery: &v1alpha2.RecoveryStatus{
			Phase: phase, Token: token, Survivor: &v1alpha2.RecoveryMember{Name: survivor}}}}
	}
	marked := func(value string) *v1alpha2.EtcdMember {
		m := &v1alpha2.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: "m0"}}
		if value != "" {
			m.Annotations = map[string]string{AnnotationForceNewCluster: value}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		cluster *v1alpha2.EtcdCluster
		member  *v1alpha2.EtcdMember
		want    bool
	}{
		{"the recovery's survivor, marked with its token", forcing(v1alpha2.RecoveryForcingNewCluster, "m0", "tok"), marked("tok"), true},
		{"no mark", forcing(v1alpha2.RecoveryForcingNewCluster, "m0", "tok"), marked(""), false},
		{"a mark put by hand", &v1alpha2.EtcdCluster{}, marked("true"), false},
		{"another token", forcing(v1alpha2.RecoveryForcingNewCluster, "m0", "tok"), marked("true"), false},
		{"another survivor", forcing(v1alpha2.RecoveryForcingNewCluster, "m1", "tok"), marked("tok"), false},
		{"a plan not consented to", forcing(v1alpha2.RecoveryPlanned, "m0", "tok"), marked("tok"), false},
		{"a completed recovery", forcing(v1alpha2.RecoveryCompleted, "m0", "tok"), marked("tok"), false},
		{"no cluster", nil, marked("tok"), false},
	} {
		if got := ForceAuthorized(tc.cluster, tc.member); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
