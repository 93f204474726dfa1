package kubectletcd

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// resultGroupVersion is the apiVersion of what the plugin prints that is not
// a Kubernetes object: etcd's members, their status and alarms, the plugin's
// version. No API server serves it; it names the shape of the output, so
// that -o json and yaml say what they hold as kubectl's output does, and
// kubectl's printers (name, jsonpath, go-template) take it.
var resultGroupVersion = schema.GroupVersion{Group: "kubectl-etcd.cozystack.io", Version: "v1alpha1"}

// memberKind is the kind -o name gives the members a result lists.
const memberKind = "Member"

func resultType(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: resultGroupVersion.String(), Kind: kind}
}

// MemberStatusList is what `status` prints: one item per member, and one
// per Pod of the cluster that etcd does not list.
type MemberStatusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []StatusRow `json:"items"`
}

func newMemberStatusList(rows []StatusRow) *MemberStatusList {
	return &MemberStatusList{TypeMeta: resultType("MemberStatusList"), Items: nonNil(rows)}
}

// DeepCopyObject implements runtime.Object.
func (l *MemberStatusList) DeepCopyObject() runtime.Object {
	out := &MemberStatusList{TypeMeta: l.TypeMeta, Items: slices.Clone(l.Items)}
	for i := range out.Items {
		r := &out.Items[i]
		r.PeerURLs, r.Alarms, r.Errors = slices.Clone(r.PeerURLs), slices.Clone(r.Alarms), slices.Clone(r.Errors)
	}
	return out
}

func (l *MemberStatusList) itemNames() (string, []string) {
	return memberKind, memberNames(l.Items, func(r StatusRow) string { return nameOrID(r.Name, r.ID) })
}

// MemberList is what `members` prints: etcd's membership.
type MemberList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []MemberRow `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *MemberList) DeepCopyObject() runtime.Object {
	out := &MemberList{TypeMeta: l.TypeMeta, Items: slices.Clone(l.Items)}
	for i := range out.Items {
		m := &out.Items[i]
		m.PeerURLs, m.ClientURLs = slices.Clone(m.PeerURLs), slices.Clone(m.ClientURLs)
	}
	return out
}

func (l *MemberList) itemNames() (string, []string) {
	return memberKind, memberNames(l.Items, func(m MemberRow) string { return nameOrID(m.Name, m.ID) })
}

// AlarmList is what `alarm list` prints: the alarms raised.
type AlarmList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []AlarmRow `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *AlarmList) DeepCopyObject() runtime.Object {
	return &AlarmList{TypeMeta: l.TypeMeta, Items: slices.Clone(l.Items)}
}

// itemNames are the members that raised an alarm, each once.
func (l *AlarmList) itemNames() (string, []string) {
	var names []string
	for _, a := range l.Items {
		if n := nameOrID(a.Name, a.MemberID); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return memberKind, names
}

// DefragResultList is what `defrag --direct` prints: the members it
// defragmented, in order.
type DefragResultList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []DefragResult `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *DefragResultList) DeepCopyObject() runtime.Object {
	return &DefragResultList{TypeMeta: l.TypeMeta, Items: slices.Clone(l.Items)}
}

func (l *DefragResultList) itemNames() (string, []string) {
	return memberKind, memberNames(l.Items, func(r DefragResult) string { return nameOrID(r.Name, r.ID) })
}

// VersionInfo is what `version` prints.
type VersionInfo struct {
	metav1.TypeMeta `json:",inline"`
	Version         string `json:"version"`
	GoVersion       string `json:"goVersion"`
	Platform        string `json:"platform"`
}

// DeepCopyObject implements runtime.Object.
func (v *VersionInfo) DeepCopyObject() runtime.Object {
	out := *v
	return &out
}

// Recovery is what `recover` prints: the cluster's status.recovery, the
// operator's plan or where carrying it out stands.
type Recovery struct {
	metav1.TypeMeta         `json:",inline"`
	v1alpha2.RecoveryStatus `json:",inline"`
}

func newRecovery(rec *v1alpha2.RecoveryStatus) *Recovery {
	return &Recovery{TypeMeta: resultType("Recovery"), RecoveryStatus: *rec.DeepCopy()}
}

// DeepCopyObject implements runtime.Object.
func (r *Recovery) DeepCopyObject() runtime.Object {
	out := newRecovery(&r.RecoveryStatus)
	out.TypeMeta = r.TypeMeta
	return out
}

// memberNames names each item of a member list.
func memberNames[T any](items []T, name func(T) string) []string {
	names := make([]string, 0, len(items))
	for _, it := range items {
		names = append(names, name(it))
	}
	return names
}

// nameOrID names a member by its name, or by its ID before it has one.
func nameOrID(name, id string) string {
	if name == "" {
		return id
	}
	return name
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
