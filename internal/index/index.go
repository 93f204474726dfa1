// Package index names the cache indexes the controllers look objects up by.
// Identity comes from what a user cannot edit by accident: a member belongs
// to the cluster its controller reference names (by UID), not to whatever
// its labels say.
package index

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Index names.
const (
	// ControllerUID indexes EtcdMembers by the UID of their controller
	// (the EtcdCluster that created them).
	ControllerUID = "metadata.controllerUID"
	// PodNode indexes member Pods by the node they run on.
	PodNode = "spec.nodeName"
	// Secret indexes EtcdMembers by the Secrets they mount and
	// EtcdClusters by the Secrets the operator reads for them (its client
	// certificate, the root passwords), so that a changed Secret wakes the
	// clusters that use it.
	Secret = "secretName"
)

// Field is one index: the kind it applies to, its name and how a value is
// extracted.
type Field struct {
	Object  client.Object
	Name    string
	Extract client.IndexerFunc
}

// Fields are every index the controllers use.
func Fields() []Field {
	return []Field{
		{Object: &v1alpha2.EtcdMember{}, Name: ControllerUID, Extract: controllerUID},
		{Object: &corev1.Pod{}, Name: PodNode, Extract: memberPodNode},
		{Object: &v1alpha2.EtcdMember{}, Name: Secret, Extract: memberSecrets},
		{Object: &v1alpha2.EtcdCluster{}, Name: Secret, Extract: clusterSecrets},
	}
}

// Register adds every index to a manager's cache.
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	for _, f := range Fields() {
		if err := indexer.IndexField(ctx, f.Object, f.Name, f.Extract); err != nil {
			return err
		}
	}
	return nil
}

func controllerUID(o client.Object) []string {
	if ref := metav1.GetControllerOf(o); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

func memberPodNode(o client.Object) []string {
	p := o.(*corev1.Pod)
	ref := metav1.GetControllerOf(p)
	if p.Spec.NodeName == "" || ref == nil || ref.Kind != "EtcdMember" {
		return nil
	}
	return []string{p.Spec.NodeName}
}

func memberSecrets(o client.Object) []string {
	var out []string
	for _, u := range manifest.MountedSecrets(o.(*v1alpha2.EtcdMember)) {
		if !slices.Contains(out, u.Name) {
			out = append(out, u.Name)
		}
	}
	return out
}

func clusterSecrets(o client.Object) []string {
	return etcdconn.SecretNames(o.(*v1alpha2.EtcdCluster))
}

// ByController selects the objects whose controller has this UID.
func ByController(uid string) client.MatchingFields {
	return client.MatchingFields{ControllerUID: uid}
}
