package cluster

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// world is everything one reconcile decides from, gathered once: the cluster,
// its members (found through their controller reference, never by label),
// the time, and (once fetched) etcd's own membership.
type world struct {
	cluster *v1alpha2.EtcdCluster
	// original is the cluster as read, to write status only when it changed.
	original *v1alpha2.EtcdCluster
	members  []*v1alpha2.EtcdMember
	now      time.Time

	// etcdMembers is etcd's membership, nil until a step fetched it.
	etcdMembers *etcd.MemberList

	// progress is what the pass is working on, for the Progressing condition.
	progress progress
	// refused is why a membership change was held back to protect quorum.
	refused string
	// unreachable is why etcd could not be asked, if it could not.
	unreachable error
	// mismatch is set when etcd answers for another cluster than the one
	// latched; nothing is changed then.
	mismatch string
	// blocked is why the cluster cannot do what its spec asks at all.
	blocked *progress
	// pods are the members' Pods by member name (from the cache).
	pods map[string]*corev1.Pod
	// stuck says why a roll-out stopped; blockedVersion why the asked
	// version cannot be reached.
	stuck, blockedVersion string
	// secrets are the Secrets the running members mount, by name (read
	// from the API server); secretProblem says which one, or which key of
	// one, is missing.
	secrets       map[string]*corev1.Secret
	secretProblem string
	// foreignCertificates describe Certificates of the operator's names
	// that the cluster does not control.
	foreignCertificates []string
	// authProblem is why etcd refuses the operator's credentials (or
	// wants some the spec does not give).
	authProblem *progress
}

// progress says what the operator is doing; an empty reason means nothing.
type progress struct {
	reason  string
	message string
}

func (w *world) working(reason, message string) {
	w.progress = progress{reason, message}
}

// desired is the latched number of members.
func (w *world) desired() int {
	if w.cluster.Status.Observed == nil {
		return 0
	}
	return int(w.cluster.Status.Observed.Replicas)
}

func deleting(m *v1alpha2.EtcdMember) bool { return m.DeletionTimestamp != nil }

// running are members meant to have a Pod: not leaving, not dormant.
func (w *world) running() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && !m.Spec.Dormant })
}

func (w *world) dormant() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && m.Spec.Dormant })
}

func (w *world) leaving() []*v1alpha2.EtcdMember {
	return w.filter(deleting)
}

// pending are members etcd may not know yet: created, no initialCluster.
func (w *world) pending() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && m.Spec.InitialCluster == "" })
}

func (w *world) seed() *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if m.Spec.Bootstrap && !deleting(m) {
			return m
		}
	}
	return nil
}

func (w *world) filter(keep func(*v1alpha2.EtcdMember) bool) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, m := range w.members {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

func ready(m *v1alpha2.EtcdMember) bool {
	return conditions.IsTrue(m.Status.Conditions, conditions.Ready)
}

func lost(m *v1alpha2.EtcdMember) bool {
	return conditions.IsTrue(m.Status.Conditions, conditions.Lost)
}

// healthy: the member serves (Ready) and can come back as itself (not Lost).
// A member being deleted still counts while it runs: its own removal is
// projected as its departure, and removals happen one at a time.
func healthy(m *v1alpha2.EtcdMember) bool { return ready(m) && !lost(m) }

// readyVoters counts the running voters that are Ready: what serves clients.
func (w *world) readyVoters() int {
	n := 0
	for _, m := range w.running() {
		if ready(m) && w.isVoter(m) {
			n++
		}
	}
	return n
}

// isVoter reports whether etcd lists the member as a voter, or, before etcd
// was asked, whether the member's status says so.
func (w *world) isVoter(m *v1alpha2.EtcdMember) bool {
	if w.etcdMembers == nil {
		return m.Status.IsVoter
	}
	em := w.etcdMemberOf(m)
	return em != nil && !em.IsLearner
}

// memberOf finds the EtcdMember etcd knows as em: by the member ID the
// member recorded, else by the peer URL its spec determines. Either one
// suffices, so neither a lost status nor an edited annotation makes a member
// look like a stranger.
func (w *world) memberOf(em etcd.Member) *v1alpha2.EtcdMember {
	id := etcd.FormatID(em.ID)
	for _, m := range w.members {
		if m.Status.MemberID == id {
			return m
		}
	}
	for _, m := range w.members {
		if slices.Contains(em.PeerURLs, manifest.PeerURL(m)) {
			return m
		}
	}
	return nil
}

// etcdMemberOf finds a member in etcd's membership, the same way.
func (w *world) etcdMemberOf(m *v1alpha2.EtcdMember) *etcd.Member {
	if w.etcdMembers == nil {
		return nil
	}
	for i := range w.etcdMembers.Members {
		if w.memberOf(w.etcdMembers.Members[i]) == m {
			return &w.etcdMembers.Members[i]
		}
	}
	return nil
}

// byID finds the member etcd knows under an ID.
func (w *world) byID(id uint64) *v1alpha2.EtcdMember {
	for _, em := range w.etcdMembers.Members {
		if em.ID == id {
			return w.memberOf(em)
		}
	}
	return nil
}

// voters lists etcd's voters with their health: the one projection every
// membership decision uses. A voter no EtcdMember accounts for counts as
// unhealthy. Before etcd was asked, the members' recorded voter flag stands
// in.
func (w *world) voters() []quorum.Voter {
	var out []quorum.Voter
	if w.etcdMembers == nil {
		for _, m := range w.running() {
			if m.Status.IsVoter {
				out = append(out, quorum.Voter{Name: m.Name, Healthy: healthy(m)})
			}
		}
		return out
	}
	for _, em := range w.etcdMembers.Members {
		if em.IsLearner {
			continue
		}
		m := w.memberOf(em)
		if m == nil {
			out = append(out, quorum.Voter{Name: strangerName(em)})
			continue
		}
		out = append(out, quorum.Voter{Name: m.Name, Healthy: healthy(m) && !m.Spec.Dormant})
	}
	return out
}

// learnerOf returns etcd's learner, if there is one.
func (w *world) learner() *etcd.Member {
	if w.etcdMembers == nil {
		return nil
	}
	for i := range w.etcdMembers.Members {
		if w.etcdMembers.Members[i].IsLearner {
			return &w.etcdMembers.Members[i]
		}
	}
	return nil
}

// strangerName names an etcd member no EtcdMember accounts for.
func strangerName(em etcd.Member) string {
	if em.Name != "" {
		return em.Name
	}
	return "id:" + etcd.FormatID(em.ID)
}

// endpoints are the members worth dialling: running members with a Pod
// that are voters, else every running member with a Pod.
func (w *world) endpoints() []*v1alpha2.EtcdMember {
	var voters, all []*v1alpha2.EtcdMember
	for _, m := range w.members {
		if m.Spec.Dormant || m.Spec.InitialCluster == "" || m.Status.PodName == "" {
			continue
		}
		all = append(all, m)
		if m.Status.IsVoter && healthy(m) {
			voters = append(voters, m)
		}
	}
	if len(voters) > 0 {
		return voters
	}
	return all
}

// upToDate reports whether a running member was made from the latched
// target and its Pod runs it (a Pod from before template hashes counts as
// current).
func (w *world) upToDate(m *v1alpha2.EtcdMember) bool {
	if w.cluster.Status.Observed == nil || !manifest.UpToDate(m, w.cluster.Status.Observed) {
		return false
	}
	if p := w.pods[m.Name]; p != nil {
		if h := p.Annotations[manifest.AnnotationTemplateHash]; h != "" && h != manifest.TemplateHash(m) {
			return false
		}
	}
	return len(w.changedSecrets(m)) == 0 && !conditions.IsFalse(m.Status.Conditions, conditions.StorageResized)
}

// changedSecrets lists the Secrets whose material changed since the
// member's Pod started (see manifest.AnnotationSecretHashes).
func (w *world) changedSecrets(m *v1alpha2.EtcdMember) []string {
	p := w.pods[m.Name]
	if p == nil || len(w.secrets) == 0 {
		return nil
	}
	return manifest.ChangedSecrets(p.Annotations[manifest.AnnotationSecretHashes], manifest.HashSecrets(manifest.MountedSecrets(m), w.secrets))
}

// updated counts the running members that are up to date.
func (w *world) updated() int {
	n := 0
	for _, m := range w.running() {
		if w.upToDate(m) {
			n++
		}
	}
	return n
}

// newest sorts members so the most recently created comes first.
func newest(ms []*v1alpha2.EtcdMember) []*v1alpha2.EtcdMember {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b *v1alpha2.EtcdMember) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out
}
