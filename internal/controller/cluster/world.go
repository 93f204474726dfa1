package cluster

import (
	"slices"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// world is everything one reconcile decides from, gathered once: the cluster,
// its members, the time, and (once fetched) etcd's own membership.
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

// readyCount counts running members whose Ready condition is True.
func (w *world) readyCount() int {
	n := 0
	for _, m := range w.running() {
		if ready(m) {
			n++
		}
	}
	return n
}

// byPeerURL finds the member etcd knows under a peer URL.
func (w *world) byPeerURL(urls []string) *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if slices.Contains(urls, build.PeerURL(m)) {
			return m
		}
	}
	return nil
}

// etcdMemberOf finds a member in etcd's membership.
func (w *world) etcdMemberOf(m *v1alpha2.EtcdMember) *etcd.Member {
	if w.etcdMembers == nil {
		return nil
	}
	url := build.PeerURL(m)
	for i := range w.etcdMembers.Members {
		if slices.Contains(w.etcdMembers.Members[i].PeerURLs, url) {
			return &w.etcdMembers.Members[i]
		}
	}
	return nil
}

// voters lists etcd's voters with their health: a voter is healthy when its
// member is Ready. A voter no EtcdMember accounts for counts as unhealthy.
// Before etcd was asked, members' recorded voter flag stands in.
func (w *world) voters() []quorum.Voter {
	var out []quorum.Voter
	if w.etcdMembers == nil {
		for _, m := range w.running() {
			if m.Status.IsVoter {
				out = append(out, quorum.Voter{Name: m.Name, Healthy: ready(m) && !lost(m)})
			}
		}
		return out
	}
	for _, em := range w.etcdMembers.Members {
		if em.IsLearner {
			continue
		}
		m := w.byPeerURL(em.PeerURLs)
		if m == nil {
			out = append(out, quorum.Voter{Name: strangerName(em)})
			continue
		}
		out = append(out, quorum.Voter{Name: m.Name, Healthy: ready(m) && !lost(m) && !deleting(m)})
	}
	return out
}

// strangerName names an etcd member no EtcdMember accounts for.
func strangerName(em etcd.Member) string {
	if em.Name != "" {
		return em.Name
	}
	return "id:" + etcd.FormatID(em.ID)
}

// voterEndpoints are the members worth dialling: running members etcd or
// their status call voters, else every running member.
func (w *world) voterEndpoints() []*v1alpha2.EtcdMember {
	var voters, all []*v1alpha2.EtcdMember
	for _, m := range w.running() {
		if m.Spec.InitialCluster == "" || m.Status.PodName == "" {
			continue
		}
		all = append(all, m)
		if m.Status.IsVoter {
			voters = append(voters, m)
		}
	}
	if len(voters) > 0 {
		return voters
	}
	return all
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
