package manifest

import (
	"maps"
	"strings"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// ClusterLabels is the label set of every object of a cluster.
func ClusterLabels(cluster string) map[string]string {
	return map[string]string{
		LabelName:      "etcd",
		LabelInstance:  cluster,
		LabelManagedBy: ManagedBy,
		LabelCluster:   cluster,
	}
}

// MemberLabels is the label set of a member's objects.
func MemberLabels(cluster, member string) map[string]string {
	l := ClusterLabels(cluster)
	l[LabelComponent] = member
	return l
}

// ClusterSelector selects every Pod of a cluster.
func ClusterSelector(cluster string) map[string]string {
	return map[string]string{LabelCluster: cluster}
}

// SelectorString renders the cluster selector for status.selector.
func SelectorString(cluster string) string { return LabelCluster + "=" + cluster }

// MemberSelectorString renders a member's selector for its status.selector.
func MemberSelectorString(cluster, member string) string {
	return LabelCluster + "=" + cluster + "," + LabelComponent + "=" + member
}

// WithExtra merges the user's additional metadata under the operator's own
// keys: the operator's keys win, and user keys under the reserved prefix are
// dropped so nobody can forge operator state.
func WithExtra(own map[string]string, extra map[string]string) map[string]string {
	out := make(map[string]string, len(own)+len(extra))
	for k, v := range extra {
		if !strings.HasPrefix(k, Prefix) {
			out[k] = v
		}
	}
	maps.Copy(out, own)
	return out
}

// ExtraLabels and ExtraAnnotations read the optional additional metadata.
func ExtraLabels(md *v1alpha2.AdditionalMetadata) map[string]string {
	if md == nil {
		return nil
	}
	return md.Labels
}

// ExtraAnnotations returns the user's additional annotations, if any.
func ExtraAnnotations(md *v1alpha2.AdditionalMetadata) map[string]string {
	if md == nil {
		return nil
	}
	return md.Annotations
}
