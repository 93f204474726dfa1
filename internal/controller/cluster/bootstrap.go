package cluster

import (
	"fmt"
	"slices"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// bootstrap forms a new cluster from a single seed member and latches its
// cluster ID. It does nothing once the cluster ID is known.
//
// Order, each step recoverable after a crash: create the seed member with
// its initialCluster (which lets the member controller start its Pod with
// --initial-cluster-state=new at once), record it as a voter, then latch the
// cluster ID, asking the seed alone. A seed an older operator created
// without an initialCluster is given one by the same step as the record.
func (pl *planner) bootstrap() bool {
	w := pl.w
	if w.cluster.Status.ClusterID != "" {
		return false
	}
	if formedBefore(w) {
		return pl.recoverClusterID()
	}
	if w.desired() == 0 {
		// Created paused: nothing to form until someone asks for members.
		return true
	}
	seed := w.seed()
	switch {
	case seed == nil && len(w.running()) > 0:
		pl.p.hold = &finding{conditions.ReasonBootstrapFailed,
			"members exist but none is the bootstrap seed and the cluster never formed; delete the EtcdCluster and create it again"}
		return true
	case seed == nil:
		pl.working(conditions.ReasonWaitingForSeed, "Creating the seed member")
		return pl.choose(&change{kind: createSeed})
	case seed.Spec.InitialCluster == "" || !seed.Status.IsVoter:
		pl.working(conditions.ReasonWaitingForSeed, "Starting seed member %s", seed.Name)
		return pl.choose(&change{kind: completeSeed, member: seed,
			initial: manifest.InitialCluster(map[string]string{seed.Name: manifest.PeerURL(seed)})})
	}
	return pl.discover(seed)
}

// discover latches the cluster ID once the seed serves: only a cluster the
// seed formed by itself is ours.
func (pl *planner) discover(seed *v1alpha2.EtcdMember) bool {
	w := pl.w
	if ok, _ := w.health(seed); !ok {
		reason, msg := seedProgress(seed)
		pl.working(reason, "%s", msg)
		if w.etcd.asked && w.pods[seed.Name] != nil && podReady(w.pods[seed.Name]) {
			// Its Pod is Ready, so etcd not answering is transient (DNS, a
			// restart): look again soon.
			pl.p.requeue = versionPoll
		}
		return true
	}
	list := w.etcd.list
	if list == nil {
		return pl.wait(versionPoll, conditions.ReasonWaitingForSeed, "Reading the membership of seed %s: %v", seed.Name, w.etcd.err)
	}
	if !formedBySeed(list, seed) {
		pl.p.hold = &finding{conditions.ReasonBootstrapFailed, fmt.Sprintf(
			"seed %s answers for a cluster with %d members it did not form alone; refusing to adopt it", seed.Name, len(list.Members))}
		// The seed's membership is not watched: look again later.
		pl.p.requeue = certManagerPoll
		return true
	}
	next := w.cluster.Status.DeepCopy()
	next.ClusterID = etcd.FormatID(list.ClusterID)
	// The cluster ID is written before any member joins: discovery only
	// trusts a seed that is alone.
	return pl.choose(&change{kind: latchStatus, status: next, reason: conditions.ReasonClusterDiscovered,
		message: fmt.Sprintf("Cluster %s formed from seed %s", next.ClusterID, seed.Name)})
}

// formedBefore reports whether the cluster formed although no cluster ID is
// latched (its status was lost): members joined it, which they do only after
// the ID is latched, or members are dormant, which happens only to a formed
// cluster.
func formedBefore(w *world) bool {
	for _, m := range w.members {
		if m.Spec.Dormant || (!m.Spec.Bootstrap && m.Spec.InitialCluster != "") {
			return true
		}
	}
	return false
}

// recoverClusterID latches the cluster ID of a formed cluster whose status
// was lost, from its members: only when etcd's whole membership is accounted
// for by this cluster's members is the answer trusted.
func (pl *planner) recoverClusterID() bool {
	w := pl.w
	if !w.etcd.asked {
		if dormant := w.dormant(); len(dormant) > 0 && w.desired() > 0 {
			pl.working(conditions.ReasonResuming, "Resuming dormant member %s", dormant[0].Name)
			return pl.choose(&change{kind: wake, member: dormant[0]})
		}
		pl.working(conditions.ReasonWaitingForMembers, "The cluster ID is not in status; waiting for a member to run to recover it from")
		return true
	}
	list := w.etcd.list
	if list == nil {
		return pl.wait(etcdRetry, conditions.ReasonClusterUnreachable, "Cannot read etcd's membership to recover the cluster ID: %v", w.etcd.err)
	}
	for _, em := range list.Members {
		if w.memberOf(em) == nil {
			pl.p.hold = &finding{conditions.ReasonClusterUnreachable, fmt.Sprintf("etcd lists member %s (%v) that no EtcdMember of this cluster accounts for; "+
				"refusing to recover the cluster ID %s from it", strangerName(em), em.PeerURLs, etcd.FormatID(list.ClusterID))}
			return true
		}
	}
	next := w.cluster.Status.DeepCopy()
	next.ClusterID = etcd.FormatID(list.ClusterID)
	return pl.choose(&change{kind: latchStatus, status: next, reason: "ClusterIDRecovered",
		message: fmt.Sprintf("Recovered cluster ID %s from the members: it was missing from status", next.ClusterID)})
}

func formedBySeed(list *etcd.MemberList, seed *v1alpha2.EtcdMember) bool {
	if len(list.Members) != 1 {
		return false
	}
	m := list.Members[0]
	return m.Name == seed.Name || slices.Contains(m.PeerURLs, manifest.PeerURL(seed))
}
