package cluster

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/secretcache"
)

// A changed Secret wakes exactly the clusters that read it: through their
// spec (the operator's client certificate, the root passwords) or through
// a member that mounts it.
func TestSecretWakesTheClustersUsingIt(t *testing.T) {
	owner := func(c *v1alpha2.EtcdCluster) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: v1alpha2.GroupVersion.String(), Kind: "EtcdCluster", Name: c.Name, UID: c.UID, Controller: ptr.To(true)}}
	}
	withSpec := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "spec", Namespace: "ns", UID: "spec-uid"},
		Spec: v1alpha2.EtcdClusterSpec{
			TLS: &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{
				ServerSecretRef:         &corev1.LocalObjectReference{Name: "server"},
				OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "op-client"},
			}},
			Auth: &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}},
		},
	}
	mounting := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "mounting", Namespace: "ns", UID: "mounting-uid"}}
	member := &v1alpha2.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: "mounting-0", Namespace: "ns", OwnerReferences: owner(mounting)},
		Spec:       v1alpha2.EtcdMemberSpec{TLS: &v1alpha2.MemberTLS{PeerSecretRef: &corev1.LocalObjectReference{Name: "peer"}}},
	}
	elsewhere := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "other", UID: "elsewhere-uid"},
		Spec:       v1alpha2.EtcdClusterSpec{TLS: &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "op-client"}}}},
	}
	r, _, _ := certTestReconciler(t, false, withSpec, mounting, member, elsewhere)
	for secret, want := range map[string][]string{
		"op-client":         {"spec"},
		"root":              {"spec"},
		"spec-root-applied": {"spec"},
		"peer":              {"mounting"},
		"unrelated":         nil,
	} {
		o := secretcache.Metadata()
		o.Namespace, o.Name = "ns", secret
		var got []string
		for _, req := range r.clustersUsingSecret(context.Background(), o) {
			if req.Namespace != "ns" {
				t.Errorf("Secret %s woke %s, in another namespace", secret, req)
			}
			got = append(got, req.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("Secret %s woke %v, want %v", secret, got, want)
		}
	}
}
