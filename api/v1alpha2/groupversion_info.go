// Package v1alpha2 holds the etcd-operator.cozystack.io/v1alpha2 API: EtcdCluster,
// EtcdMember, EtcdSnapshot and EtcdDefrag.
//
// The API is a compatible superset of the published Cozystack API of the same
// name: every manifest valid there is valid here with the same meaning, and every
// field added here is optional.
//
// +kubebuilder:object:generate=true
// +groupName=etcd-operator.cozystack.io
package v1alpha2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "etcd-operator.cozystack.io", Version: "v1alpha2"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
