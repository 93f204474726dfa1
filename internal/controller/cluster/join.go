package cluster

import (
	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// A member joins in steps, each recoverable after a crash: its EtcdMember
// is created (initialCluster empty); the membership it will join with is
// recorded on it (etcd's membership and itself), so that the member
// controller starts its Pod at once, held by the join gate; once the Pod's
// address is in the headless Service's endpoints (so cluster DNS knows the
// member's name before etcd's leader first asks for it), etcd adds it as a
// learner, the gate lets etcd start, and the membership is recorded as its
// initialCluster. Once its applied index has caught up with the leader's,
// it is promoted. Without the operator's image (no gate) the Pod starts
// only after the add.

// recordJoined finishes the third step for members etcd already lists: the
// operator stopped between adding one and recording it. No etcd change.
func (pl *planner) recordJoined() bool {
	w := pl.w
	if w.etcd.list == nil {
		return false
	}
	for _, m := range w.pending() {
		if !m.Spec.Bootstrap && w.etcdMemberOf(m) != nil {
			return pl.choose(&change{kind: recordJoined, member: m, initial: initialClusterFor(w, m)})
		}
	}
	return false
}

// addPending adds a created member to etcd as a learner. etcd holds one
// learner at a time.
func (pl *planner) addPending() bool {
	w := pl.w
	if w.etcd.list == nil {
		return false
	}
	for _, m := range w.pending() {
		if m.Spec.Bootstrap || w.etcdMemberOf(m) != nil {
			continue
		}
		if l := w.learner(); l != nil {
			pl.working(conditions.ReasonScalingUp, "Waiting for learner %s before adding %s", strangerName(*l), m.Name)
			return false
		}
		if prepared := m.Annotations[manifest.AnnotationJoinCluster]; prepared != "" && w.joinGate {
			if prepared != joinClusterFor(w, m) {
				pl.working(conditions.ReasonReplacingMember, "Replacing member %s: etcd's membership changed since it was prepared to join", m.Name)
				return pl.choose(&change{kind: deleteMember, member: m, reason: conditions.ReasonReplacingMember,
					message: "Replacing member " + m.Name + ": etcd's membership changed since it was prepared to join"})
			}
			if !published(w, m) {
				// The EndpointSlice's change brings the next pass; a member
				// that never gets there is retired by a later stage.
				pl.working(conditions.ReasonScalingUp, "Waiting for the Pod of %s to be in the cluster's endpoints before adding it", m.Name)
				return false
			}
		}
		if d := quorum.AddLearner(w.voters()); !d.OK {
			pl.refuse(nil, "%s", d.Reason)
			return false
		}
		pl.working(conditions.ReasonScalingUp, "Adding member %s", m.Name)
		return pl.choose(&change{kind: addLearner, member: m})
	}
	return false
}

// published reports whether the member's Pod address is in an EndpointSlice
// of the headless Service its DNS name comes from.
func published(w *world, m *v1alpha2.EtcdMember) bool {
	pod := w.pods[m.Name]
	return pod != nil && pod.Status.PodIP != "" && w.published[manifest.ServiceName(m)][pod.Status.PodIP]
}

// promoteLearner promotes etcd's learner once it has caught up with the
// leader, by both their fresh reports. A learner that is leaving, lost or
// not started yet holds nothing else up. The learner's own answer in this
// pass proves it serves as the member etcd lists: the promotion does not
// wait for the member controller to record the ID as well (its first call
// to a new learner can take its whole timeout).
func (pl *planner) promoteLearner() bool {
	w := pl.w
	em := w.learner()
	if em == nil {
		return false
	}
	m := w.memberOf(*em)
	if m == nil || deleting(m) || m.Spec.Dormant || lost(m) {
		return false
	}
	pl.working(conditions.ReasonPromotingLearner, "Waiting for learner %s to catch up", m.Name)
	if why := w.podProblem(m); why != "" {
		// The learner does not run yet; its Pod's changes wake us.
		return false
	}
	if st := w.etcd.status[m.Name]; st != nil && st.MemberID != em.ID {
		return pl.wait(etcdRetry, conditions.ReasonPromotingLearner, "Waiting for learner %s: it answers as member %s, etcd lists it as %s",
			m.Name, etcd.FormatID(st.MemberID), etcd.FormatID(em.ID))
	}
	if ok, why := w.caughtUp(m); !ok {
		// Catching up is not watched: look again shortly.
		return pl.wait(etcdRetry, conditions.ReasonPromotingLearner, "Waiting for learner %s to catch up: %s", m.Name, why)
	}
	if d := quorum.Promote(w.voters(), m.Name, true); !d.OK {
		pl.refuse(m, "%s", d.Reason)
		return false
	}
	pl.working(conditions.ReasonPromotingLearner, "Promoting learner %s", m.Name)
	return pl.choose(&change{kind: promote, member: m, etcdID: em.ID})
}

// joinTarget is what a new or replacement member is made from: the latched
// target, at a version the running cluster accepts. etcd refuses a member
// older than its cluster version, so while a downgrade has not lowered the
// cluster version yet, a member joins at the version the others run and the
// roll-out brings it down with them (issue: a 3.5 learner never joins a 3.6
// cluster).
func joinTarget(w *world) *v1alpha2.ObservedClusterSpec {
	o := w.cluster.Status.Observed.DeepCopy()
	o.Version = joinVersion(w)
	return o
}

// joinVersion is the version a member that joins now runs.
func joinVersion(w *world) string {
	target := w.cluster.Status.Observed.Version
	cv, tv := w.clusterVersion(), minorOf(target)
	t, err1 := version.Parse(target)
	c, err2 := version.Parse(cv + ".0")
	if cv == "" || err1 != nil || err2 != nil || t.Minor >= c.Minor || t.Major != c.Major {
		return target
	}
	for _, m := range w.running() {
		for _, v := range []string{m.Status.Version, m.Spec.Version} {
			if v != "" && minorOf(v) == cv && minorOf(v) != tv {
				return v
			}
		}
	}
	return target
}

// joinClusterFor is the --initial-cluster a member not yet in etcd will join
// with: etcd's membership now, and itself.
func joinClusterFor(w *world, joining *v1alpha2.EtcdMember) string {
	peers := map[string]string{joining.Name: manifest.PeerURL(joining)}
	for _, em := range w.etcd.list.Members {
		if len(em.PeerURLs) == 0 {
			continue
		}
		name := em.Name
		if m := w.memberOf(em); m != nil {
			name = m.Name
		}
		if name != "" {
			peers[name] = em.PeerURLs[0]
		}
	}
	return manifest.InitialCluster(peers)
}

// initialClusterFor renders --initial-cluster from etcd's own membership. A
// member that has not started yet has no name in etcd; the one joining now is
// named after its EtcdMember.
func initialClusterFor(w *world, joining *v1alpha2.EtcdMember) string {
	peers := map[string]string{}
	for _, em := range w.etcd.list.Members {
		if len(em.PeerURLs) == 0 {
			continue
		}
		name := em.Name
		if m := w.memberOf(em); m != nil && (m == joining || name == "") {
			name = m.Name
		}
		if name != "" {
			peers[name] = em.PeerURLs[0]
		}
	}
	return manifest.InitialCluster(peers)
}
