package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// AnnotationTemplateHash on a member Pod is the TemplateHash of the member
// spec the Pod was built from. A Pod whose hash differs from its member's
// runs an older template and is restarted by a roll-out; a Pod without one
// (made before the annotation existed) is taken as current.
const AnnotationTemplateHash = Prefix + "template-hash"

// AnnotationSnapshotCount on an EtcdMember (set and removed by the
// operator) overrides --snapshot-count. Before a member moves from 3.6 to
// 3.7 it is restarted once on 3.6 with a count of 1, which makes it
// snapshot at once: etcd 3.7 cannot replay raft log entries written by 3.5
// (the v2 requests it dropped), and a member only replays what follows its
// last snapshot.
const AnnotationSnapshotCount = Prefix + "snapshot-count"

// rolled is what of a member's spec its Pod is built from and a roll-out
// changes: everything but identity, storage and membership.
type rolled struct {
	Version                   string `json:"v"`
	Resources                 any    `json:"r,omitempty"`
	Options                   any    `json:"o,omitempty"`
	Affinity                  any    `json:"a,omitempty"`
	TopologySpreadConstraints any    `json:"t,omitempty"`
	ImagePullSecrets          any    `json:"i,omitempty"`
	AdditionalMetadata        any    `json:"m,omitempty"`
	SnapshotCount             string `json:"s,omitempty"`
	// Placement: empty for a member that sets none, so its hash is what it
	// was before these fields existed and an operator upgrade rolls nothing.
	Tolerations       any    `json:"to,omitempty"`
	NodeSelector      any    `json:"ns,omitempty"`
	PriorityClassName string `json:"pc,omitempty"`
	RuntimeClassName  any    `json:"rc,omitempty"`
	SchedulerName     string `json:"sn,omitempty"`
	ExtraArgs         any    `json:"x,omitempty"`
	Env               any    `json:"e,omitempty"`
}

// TemplateHash is a short hash of what a member's Pod is built from.
func TemplateHash(m *v1alpha2.EtcdMember) string {
	s := m.Spec
	r := rolled{Version: s.Version, Resources: s.Resources, Options: s.Options, Affinity: s.Affinity,
		TopologySpreadConstraints: s.TopologySpreadConstraints, ImagePullSecrets: s.ImagePullSecrets,
		AdditionalMetadata: s.AdditionalMetadata, SnapshotCount: m.Annotations[AnnotationSnapshotCount],
		PriorityClassName: s.PriorityClassName, SchedulerName: s.SchedulerName}
	// A nil any is left out; a typed nil would not be.
	if len(s.Tolerations) > 0 {
		r.Tolerations = s.Tolerations
	}
	if len(s.NodeSelector) > 0 {
		r.NodeSelector = s.NodeSelector
	}
	if s.RuntimeClassName != nil {
		r.RuntimeClassName = s.RuntimeClassName
	}
	if len(s.ExtraArgs) > 0 {
		r.ExtraArgs = s.ExtraArgs
	}
	if len(s.Env) > 0 {
		r.Env = s.Env
	}
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:5])
}

// Retemplate copies the latched target into a member's spec: what a roll-out
// changes. It reports whether anything changed.
func Retemplate(m *v1alpha2.EtcdMember, o *v1alpha2.ObservedClusterSpec) bool {
	before := m.DeepCopy()
	delete(m.Annotations, AnnotationSnapshotCount)
	m.Spec.Version = o.Version
	m.Spec.PodSettings = *o.PodSettings.DeepCopy()
	if o.Storage.Size.Cmp(m.Spec.Storage.Size) > 0 {
		m.Spec.Storage.Size = o.Storage.Size
	}
	return !equality.Semantic.DeepEqual(before.Spec, m.Spec) || len(before.Annotations) != len(m.Annotations)
}

// UpToDate reports whether a member's spec carries the latched target.
func UpToDate(m *v1alpha2.EtcdMember, o *v1alpha2.ObservedClusterSpec) bool {
	c := m.DeepCopy()
	return !Retemplate(c, o)
}
