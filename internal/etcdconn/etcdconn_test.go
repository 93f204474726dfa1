package etcdconn

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

func memberPod(name, uid, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + uid, Namespace: "ns", UID: types.UID("u" + uid), Labels: map[string]string{manifest.LabelCluster: "c"}},
		Spec:       corev1.PodSpec{Hostname: name, Subdomain: "c"},
		Status:     corev1.PodStatus{PodIP: ip},
	}
}

// Member Pods map to their addresses; a Pod without one yet maps to no
// address (which the dialer refuses rather than asking DNS); while a
// member's Pod is made again, the one with an address wins.
func TestPodAddresses(t *testing.T) {
	pods := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		memberPod("a", "1", "10.0.0.1"),
		memberPod("b", "2", ""),
		memberPod("r", "3", ""), memberPod("r", "4", "10.0.0.4"), memberPod("r", "5", ""),
	).Build()
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	resolve := podAddresses(context.Background(), pods, c)
	for _, tc := range []struct {
		host, ip string
		known    bool
	}{
		{"a.c.ns.svc", "10.0.0.1", true},
		{"b.c.ns.svc", "", true},
		{"r.c.ns.svc", "10.0.0.4", true},
		{"other.c.ns.svc", "", false},
	} {
		if ip, ok := resolve(tc.host); ip != tc.ip || ok != tc.known {
			t.Errorf("resolve(%s) = %q, %v; want %q, %v", tc.host, ip, ok, tc.ip, tc.known)
		}
	}
}
