package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// bootstrap forms a new cluster from a single seed member and latches its
// cluster ID. It does nothing once the cluster ID is known.
//
// Order, each step recoverable after a crash: create the seed member (name from
// GenerateName), record it as a voter, record its initialCluster (which lets
// the member controller start its Pod with --initial-cluster-state=new), then
// discover the cluster ID from the seed alone.
func (r *Reconciler) bootstrap(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.cluster.Status.ClusterID != "" {
		return nil, nil
	}
	if formedBefore(w) {
		return r.recoverClusterID(ctx, w)
	}
	if w.desired() == 0 {
		// Created paused: nothing to form until someone asks for members.
		return done(), nil
	}
	seed := w.seed()
	if seed == nil {
		if len(w.running()) > 0 {
			return nil, errors.New("members exist but none is the bootstrap seed and the cluster never formed; delete the EtcdCluster and create it again")
		}
		created, err := r.createMember(ctx, w, true)
		if err != nil {
			return nil, err
		}
		seed = created
	}
	if seed.Spec.InitialCluster == "" {
		return r.completeSeed(ctx, w, seed)
	}
	return r.discover(ctx, w, seed)
}

// createMember creates a new member from the latched target and records the
// expectation that the cache will show it.
func (r *Reconciler) createMember(ctx context.Context, w *world, seed bool) (*v1alpha2.EtcdMember, error) {
	m := manifest.NewMember(w.cluster, seed)
	if err := r.Client.Create(ctx, m); err != nil {
		r.Metrics.MembershipOp(w.cluster, "create", err)
		return nil, fmt.Errorf("creating member: %w", err)
	}
	r.expect.created(client.ObjectKeyFromObject(w.cluster).String(), m.Name, w.now)
	r.Metrics.MembershipOp(w.cluster, "create", nil)
	w.members = append(w.members, m)
	what := "member"
	if seed {
		what = "seed member"
	}
	r.event(w.cluster, false, "MemberCreated", "CreateMember", "Created %s %s", what, m.Name)
	logf(ctx, w)("Created member", "member", m.Name, "seed", seed)
	return m, nil
}

// completeSeed records the seed as a voter and gives it its initialCluster.
func (r *Reconciler) completeSeed(ctx context.Context, w *world, seed *v1alpha2.EtcdMember) (*ctrl.Result, error) {
	if !seed.Status.IsVoter {
		patch := client.MergeFrom(seed.DeepCopy())
		seed.Status.IsVoter = true
		if err := r.Client.Status().Patch(ctx, seed, patch); err != nil {
			return nil, fmt.Errorf("recording seed %s as a voter: %w", seed.Name, err)
		}
	}
	initial := manifest.InitialCluster(map[string]string{seed.Name: manifest.PeerURL(seed)})
	if err := r.setInitialCluster(ctx, seed, initial); err != nil {
		return nil, err
	}
	w.working(conditions.ReasonWaitingForSeed, fmt.Sprintf("Starting seed member %s", seed.Name))
	return done(), nil
}

// discover latches the cluster ID, asking the seed alone: only a cluster the
// seed formed by itself is ours.
func (r *Reconciler) discover(ctx context.Context, w *world, seed *v1alpha2.EtcdMember) (*ctrl.Result, error) {
	if !ready(seed) {
		w.working(seedProgress(seed))
		if c := conditions.Get(seed.Status.Conditions, conditions.Ready); c != nil &&
			(c.Reason == conditions.ReasonAuthRequiredNotConfigured || c.Reason == conditions.ReasonAuthCredentialsRejected) {
			w.authProblem = &progress{c.Reason, fmt.Sprintf("Seed member %s: %s", seed.Name, c.Message)}
			r.warnOnce(w, c.Reason, "Discover", w.authProblem.message)
		}
		return done(), nil
	}
	list, err := r.memberList(ctx, w, []*v1alpha2.EtcdMember{seed})
	if err != nil {
		r.unreachable(w, err)
		// The seed is Ready, so this is transient (DNS, a restart): retry soon.
		return stop(2 * time.Second), nil
	}
	if !formedBySeed(list, seed) {
		msg := fmt.Sprintf("seed %s answers for a cluster with %d members it did not form alone; refusing to adopt it", seed.Name, len(list.Members))
		w.unreachable = errors.New(msg)
		r.warnOnce(w, "DiscoveryRefused", "Discover", msg)
		// The seed's membership is not watched: look again later.
		return stop(30 * time.Second), nil
	}
	w.cluster.Status.ClusterID = etcd.FormatID(list.ClusterID)
	r.event(w.cluster, false, conditions.ReasonClusterDiscovered, "Discover", "Cluster %s formed from seed %s", w.cluster.Status.ClusterID, seed.Name)
	logf(ctx, w)("Cluster formed", "clusterID", w.cluster.Status.ClusterID, "seed", seed.Name)
	// The cluster ID is written before any member joins: discovery only
	// trusts a seed that is alone.
	return done(), nil
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
func (r *Reconciler) recoverClusterID(ctx context.Context, w *world) (*ctrl.Result, error) {
	if len(w.endpoints()) == 0 {
		if dormant := w.dormant(); len(dormant) > 0 && w.desired() > 0 {
			return r.setDormant(ctx, w, dormant[0], false)
		}
		w.working(conditions.ReasonWaitingForMembers, "The cluster ID is not in status; waiting for a member to run to recover it from")
		return done(), nil
	}
	list, err := r.memberList(ctx, w, nil)
	if err != nil {
		r.unreachable(w, err)
		return stop(etcdRetry), nil
	}
	for _, em := range list.Members {
		if w.memberOf(em) == nil {
			msg := fmt.Sprintf("etcd lists member %s (%v) that no EtcdMember of this cluster accounts for; "+
				"refusing to recover the cluster ID %s from it", strangerName(em), em.PeerURLs, etcd.FormatID(list.ClusterID))
			w.unreachable = errors.New(msg)
			r.warnOnce(w, "ClusterIDRecoveryRefused", "Recover", msg)
			return done(), nil
		}
	}
	w.cluster.Status.ClusterID = etcd.FormatID(list.ClusterID)
	r.event(w.cluster, false, "ClusterIDRecovered", "Recover", "Recovered cluster ID %s from the members: it was missing from status", w.cluster.Status.ClusterID)
	return done(), nil
}

func formedBySeed(list *etcd.MemberList, seed *v1alpha2.EtcdMember) bool {
	if len(list.Members) != 1 {
		return false
	}
	m := list.Members[0]
	return m.Name == seed.Name || slices.Contains(m.PeerURLs, manifest.PeerURL(seed))
}
