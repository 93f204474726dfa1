// Package migrate adopts live etcd.aenix.io/v1alpha1 clusters in place: it
// reads a legacy EtcdCluster and what the legacy operator made for it (a
// StatefulSet, its Pods and PVCs, two Services, a ConfigMap, a PDB), asks the
// running etcd who its members are, and hands the same Pods and volumes to an
// EtcdCluster and one EtcdMember per member. No data moves, no Pod restarts,
// etcd's membership is never touched.
package migrate

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// LegacyGVR is the resource of legacy clusters; it is read as unstructured so
// that no legacy Go types are needed.
var LegacyGVR = schema.GroupVersionResource{Group: "etcd.aenix.io", Version: "v1alpha1", Resource: "etcdclusters"}

// Facts about the objects the legacy operator makes.
const (
	// LegacyDefaultImage is the image the legacy operator runs when the pod
	// template names none.
	LegacyDefaultImage = "quay.io/coreos/etcd:v3.5.12"
	// LegacyDataSubPath is where, inside the volume, the legacy operator put
	// etcd's data directory (--data-dir=/var/run/etcd/default.etcd).
	LegacyDataSubPath = "default.etcd"
	// LegacyClaimTemplate is the default name of the claim template, which
	// makes the claims data-<cluster>-<i>: the name this operator gives a
	// member's claim (data-<member>) when the member is named after the Pod.
	LegacyClaimTemplate = "data"
)

// legacySpec mirrors the parts of the legacy spec the tool reads. Fields it
// does not know are found by walking the unstructured object instead.
type legacySpec struct {
	Replicas    *int32            `json:"replicas,omitempty"`
	Options     map[string]string `json:"options,omitempty"`
	PodTemplate struct {
		Metadata struct {
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"metadata"`
		Spec corev1.PodSpec `json:"spec"`
	} `json:"podTemplate"`
	ServiceTemplate *struct {
		Metadata struct {
			Name string `json:"name,omitempty"`
		} `json:"metadata"`
	} `json:"serviceTemplate,omitempty"`
	HeadlessServiceTemplate *struct {
		Metadata struct {
			Name string `json:"name,omitempty"`
		} `json:"metadata"`
	} `json:"headlessServiceTemplate,omitempty"`
	PodDisruptionBudgetTemplate *json.RawMessage `json:"podDisruptionBudgetTemplate,omitempty"`
	Storage                     struct {
		EmptyDir            *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`
		VolumeClaimTemplate struct {
			Metadata struct {
				Name        string            `json:"name,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"metadata"`
			Spec corev1.PersistentVolumeClaimSpec `json:"spec"`
		} `json:"volumeClaimTemplate"`
	} `json:"storage"`
	Security *struct {
		EnableAuth bool      `json:"enableAuth,omitempty"`
		TLS        legacyTLS `json:"tls"`
	} `json:"security,omitempty"`
	Bootstrap *json.RawMessage `json:"bootstrap,omitempty"`
}

// legacyTLS names the legacy TLS Secrets.
type legacyTLS struct {
	PeerTrustedCASecret   string `json:"peerTrustedCASecret,omitempty"`
	PeerSecret            string `json:"peerSecret,omitempty"`
	ServerTrustedCASecret string `json:"serverTrustedCASecret,omitempty"`
	ServerSecret          string `json:"serverSecret,omitempty"`
	ClientTrustedCASecret string `json:"clientTrustedCASecret,omitempty"`
	ClientSecret          string `json:"clientSecret,omitempty"`
}

// Legacy is one legacy EtcdCluster as read from the API server.
type Legacy struct {
	Object *unstructured.Unstructured
	Spec   legacySpec
}

// ParseLegacy decodes a legacy EtcdCluster.
func ParseLegacy(u *unstructured.Unstructured) (*Legacy, error) {
	l := &Legacy{Object: u}
	raw, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec")
	if err != nil {
		return nil, fmt.Errorf("reading spec of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &l.Spec); err != nil {
		return nil, fmt.Errorf("decoding spec of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return l, nil
}

// Name and Namespace of the legacy cluster.
func (l *Legacy) Name() string { return l.Object.GetName() }

// Namespace of the legacy cluster.
func (l *Legacy) Namespace() string { return l.Object.GetNamespace() }

// HeadlessService is the legacy headless Service, under which the legacy
// members' peer URLs live.
func (l *Legacy) HeadlessService() string {
	if t := l.Spec.HeadlessServiceTemplate; t != nil && t.Metadata.Name != "" {
		return t.Metadata.Name
	}
	return l.Name() + "-headless"
}

// ClientService is the legacy client Service.
func (l *Legacy) ClientService() string {
	if t := l.Spec.ServiceTemplate; t != nil && t.Metadata.Name != "" {
		return t.Metadata.Name
	}
	return l.Name()
}

// ConfigMap is the legacy cluster-state ConfigMap.
func (l *Legacy) ConfigMap() string { return l.Name() + "-cluster-state" }

// ClaimTemplate is the name of the legacy claim template.
func (l *Legacy) ClaimTemplate() string {
	if n := l.Spec.Storage.VolumeClaimTemplate.Metadata.Name; n != "" {
		return n
	}
	return LegacyClaimTemplate
}

// ClusterToken is the legacy --initial-cluster-token.
func (l *Legacy) ClusterToken() string { return l.Name() + "-" + l.Namespace() }

// SelectorLabels are the labels the legacy operator put on its Pods and
// selected them by.
func (l *Legacy) SelectorLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "etcd",
		"app.kubernetes.io/instance":   l.Name(),
		"app.kubernetes.io/managed-by": "etcd-operator",
	}
}

// etcdContainer is the legacy pod template's etcd container, if any.
func (l *Legacy) etcdContainer() *corev1.Container {
	for i := range l.Spec.PodTemplate.Spec.Containers {
		if l.Spec.PodTemplate.Spec.Containers[i].Name == "etcd" {
			return &l.Spec.PodTemplate.Spec.Containers[i]
		}
	}
	return nil
}
