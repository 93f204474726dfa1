package cluster

import (
	"fmt"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// scale moves the number of running members one step towards the target:
// wake a dormant member or add one learner when short, pause or remove one
// member when over. A cluster that has not formed is the bootstrap's.
func (pl *planner) scale() bool {
	w := pl.w
	if w.cluster.Status.ClusterID == "" {
		return false
	}
	running, desired := len(w.running()), w.desired()
	switch {
	case running < desired:
		return pl.grow()
	case running > desired:
		return pl.shrink()
	case desired == 0 && len(w.leaving()) > 0:
		// A member deleted while paused holds the cluster's only copy of
		// the data: it stays (its finalizer too) until the cluster resumes.
		m := w.leaving()[0]
		pl.working(conditions.ReasonPaused, "Member %s was deleted while the cluster is paused: it keeps the cluster's data "+
			"until the cluster is resumed and a replacement has joined (delete the EtcdCluster to discard the data)", m.Name)
		return true
	}
	return false
}

func (pl *planner) grow() bool {
	w := pl.w
	if dormant := w.dormant(); len(dormant) > 0 {
		pl.working(conditions.ReasonResuming, "Resuming dormant member %s", dormant[0].Name)
		return pl.choose(&change{kind: wake, member: dormant[0]})
	}
	if m := onlyCopy(w); m != nil {
		// Resuming a cluster whose dormant member was deleted while it was
		// paused: that member holds the data, so it runs again and leaves
		// once a replacement joined.
		pl.working(conditions.ReasonResuming, "Resuming deleted dormant member %s: it holds the cluster's data", m.Name)
		return pl.choose(&change{kind: wake, member: m})
	}
	for _, m := range w.running() {
		switch ok, why := w.health(m); {
		case !ok:
			pl.working(conditions.ReasonWaitingForMembers, "Waiting for member %s to be a ready voter before adding the next (%s)", m.Name, why)
			return true
		case !w.isVoter(m):
			pl.working(conditions.ReasonWaitingForMembers, "Waiting for member %s to be a ready voter before adding the next", m.Name)
			return true
		}
	}
	if w.etcd.list == nil {
		pl.working(conditions.ReasonWaitingForMembers, "Waiting for a running member to add the next one through")
		return true
	}
	if l := w.learner(); l != nil {
		pl.working(conditions.ReasonWaitingForMembers, "Waiting for etcd's learner %s to be promoted or removed", strangerName(*l))
		return true
	}
	if len(w.pending()) > 0 {
		// One joining at a time; its add is under way.
		return true
	}
	if d := quorum.AddLearner(w.voters()); !d.OK {
		pl.refuse(nil, "%s", d.Reason)
		return true
	}
	pl.working(conditions.ReasonScalingUp, "Adding a member (%d of %d run)", len(w.running()), w.desired())
	return pl.choose(&change{kind: createJoiner})
}

// onlyCopy is a deleted dormant member that holds the data of a cluster in
// which no member runs.
func onlyCopy(w *world) *v1alpha2.EtcdMember {
	if len(w.running()) > 0 {
		return nil
	}
	for _, m := range w.leaving() {
		if m.Spec.Dormant && !lost(m) {
			return m
		}
	}
	return nil
}

func (pl *planner) shrink() bool {
	w := pl.w
	if leaving := w.leaving(); len(leaving) > 0 {
		// One removal at a time: the next victim waits for this one.
		pl.working(conditions.ReasonScalingDown, "Waiting for member %s to leave", leaving[0].Name)
		return true
	}
	running := w.running()
	if w.desired() == 0 && len(running) == 1 {
		pl.working(conditions.ReasonPausing, "Pausing: member %s goes dormant", running[0].Name)
		return pl.choose(&change{kind: setDormant, member: running[0]})
	}
	victim := chooseVictim(w)
	if w.isVoter(victim) {
		if d := quorum.Remove(w.voters(), victim.Name); !d.OK {
			pl.refuse(nil, "scaling down waits: %s", d.Reason)
			return true
		}
	}
	pl.working(conditions.ReasonScalingDown, "Removing member %s", victim.Name)
	c := &change{kind: deleteMember, member: victim, reason: "MemberRemoved",
		message: fmt.Sprintf("Removing member %s to scale down", victim.Name)}
	if em := w.etcdMemberOf(victim); em != nil {
		// Out of etcd in the same pass, on the same fresh view the
		// quorum check above read.
		c.thenRemove = true
		withRemoval(w, c, em)
	}
	return pl.choose(c)
}

// chooseVictim picks the member to remove: one etcd does not count yet
// (pending, learner), then a lost or unhealthy one, then the newest.
func chooseVictim(w *world) *v1alpha2.EtcdMember {
	ordered := newest(w.running())
	rank := func(m *v1alpha2.EtcdMember) int {
		switch {
		case m.Spec.InitialCluster == "":
			return 0
		case !w.isVoter(m):
			return 1
		case lost(m):
			return 2
		case !w.healthy(m):
			return 3
		}
		return 4
	}
	best := ordered[0]
	for _, m := range ordered[1:] {
		if rank(m) < rank(best) {
			best = m
		}
	}
	return best
}
