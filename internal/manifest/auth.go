package manifest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// RootUser is the etcd user the operator enables authentication with.
const RootUser = "root"

// KeyPassword is the key of a basic-auth Secret holding the password.
const KeyPassword = "password"

// AuthWanted reports whether the cluster asks for etcd authentication.
func AuthWanted(c *v1alpha2.EtcdCluster) bool {
	return c.Spec.Auth != nil && c.Spec.Auth.Enabled && c.Spec.Auth.RootCredentialsSecretRef != nil
}

// AppliedPasswordSecretName is the operator's own Secret with the root
// password etcd has now. The user's Secret says what the password should
// be; when it changes, the operator logs in with the applied one to change
// it in etcd, then records the new one here, so that neither a crash nor a
// changed Secret ever leaves it without a password etcd accepts.
func AppliedPasswordSecretName(cluster string) string { return cluster + "-root-applied" }

// AppliedPasswordSecret renders that Secret, owned by the cluster.
func AppliedPasswordSecret(c *v1alpha2.EtcdCluster, password []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            AppliedPasswordSecretName(c.Name),
			Namespace:       c.Namespace,
			Labels:          map[string]string{LabelManagedBy: ManagedBy, LabelCluster: c.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(c, v1alpha2.GroupVersion.WithKind("EtcdCluster"))},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{KeyPassword: password},
	}
}
