// Package v1alpha2 holds the etcd-operator.cozystack.io/v1alpha2 API: EtcdCluster,
// EtcdMember, EtcdSnapshot, EtcdSnapshotSchedule, EtcdDefrag and
// EtcdDefragPolicy.
//
// The API is a compatible superset of the published Cozystack API of the same
// name: every manifest valid there is valid here with the same meaning, and every
// field added here is optional.
//
// +kubebuilder:object:generate=true
// +groupName=etcd-operator.cozystack.io
package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "etcd-operator.cozystack.io", Version: "v1alpha2"}

var (
	// knownTypes collects the kinds each types file registers in its init.
	knownTypes []runtime.Object

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, knownTypes...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// register adds kinds to the scheme builder; the types files call it.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }
