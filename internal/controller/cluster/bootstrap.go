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
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
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
	if w.desired() == 0 {
		// Created paused: nothing to form until someone asks for members.
		return done(), nil
	}
	if terminal(w) {
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
	m := build.NewMember(w.cluster, seed)
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
	initial := build.InitialCluster(map[string]string{seed.Name: build.PeerURL(seed)})
	if err := r.setInitialCluster(ctx, seed, initial); err != nil {
		return nil, err
	}
	w.working(conditions.ReasonWaitingForSeed, fmt.Sprintf("Starting seed member %s", seed.Name))
	return done(), nil
}

// setInitialCluster records etcd's view of the membership on a member; from
// then on the member controller may start its Pod.
func (r *Reconciler) setInitialCluster(ctx context.Context, m *v1alpha2.EtcdMember, initial string) error {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.InitialCluster = initial
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[build.LabelComponent] = m.Name
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("recording initialCluster of %s: %w", m.Name, err)
	}
	return nil
}

// discover latches the cluster ID, asking the seed alone: only a cluster the
// seed formed by itself is ours.
func (r *Reconciler) discover(ctx context.Context, w *world, seed *v1alpha2.EtcdMember) (*ctrl.Result, error) {
	if !ready(seed) {
		w.working(conditions.ReasonWaitingForSeed, fmt.Sprintf("Waiting for seed member %s to become ready", seed.Name))
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
		r.event(w.cluster, true, "DiscoveryRefused", "Discover", "%s", msg)
		return stop(30 * time.Second), nil
	}
	w.cluster.Status.ClusterID = etcd.FormatID(list.ClusterID)
	r.event(w.cluster, false, conditions.ReasonClusterDiscovered, "Discover", "Cluster %s formed from seed %s", w.cluster.Status.ClusterID, seed.Name)
	logf(ctx, w)("Cluster formed", "clusterID", w.cluster.Status.ClusterID, "seed", seed.Name)
	// The cluster ID is written before any member joins: discovery only
	// trusts a seed that is alone.
	return done(), nil
}

func formedBySeed(list *etcd.MemberList, seed *v1alpha2.EtcdMember) bool {
	if len(list.Members) != 1 {
		return false
	}
	m := list.Members[0]
	return m.Name == seed.Name || slices.Contains(m.PeerURLs, build.PeerURL(seed))
}

// unreachable records that etcd could not be asked.
func (r *Reconciler) unreachable(w *world, err error) {
	w.unreachable = err
}

// memberList asks the given members (or every reachable voter) for etcd's
// membership and keeps it in the world for the rest of the pass.
func (r *Reconciler) memberList(ctx context.Context, w *world, via []*v1alpha2.EtcdMember) (*etcd.MemberList, error) {
	if w.etcdMembers != nil {
		return w.etcdMembers, nil
	}
	c, err := r.dial(ctx, w, via)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := c.MemberList(rctx)
	if err != nil {
		return nil, err
	}
	w.etcdMembers = list
	return list, nil
}
