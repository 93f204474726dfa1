package cluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The actions of growth (join.go plans them): a joiner's EtcdMember, its
// learner in etcd, and its promotion.

// createJoiner creates a member and, without the join gate, adds it to
// etcd in the same pass; with the gate, its Pod's address in the endpoints
// brings the add.
func (r *Reconciler) createJoiner(ctx context.Context, w *world) outcome {
	m, err := r.createMember(ctx, w, false)
	if err != nil {
		return outcome{err: err}
	}
	if w.joinGate {
		return outcome{learned: learned{created: m}}
	}
	o := r.addLearner(ctx, w.after(learned{created: m}), m)
	o.learned.created = m
	return o
}

// addLearner adds the member to etcd as a learner and records the
// membership as its initialCluster.
func (r *Reconciler) addLearner(ctx context.Context, w *world, m *v1alpha2.EtcdMember) outcome {
	var added *etcd.Member
	err := r.withClient(ctx, w, nil, func(ctx context.Context, c etcd.Client) error {
		var err error
		added, err = c.MemberAddAsLearner(ctx, []string{manifest.PeerURL(m)})
		return err
	})
	r.Metrics.MembershipOp(w.cluster, "add-learner", err)
	if err != nil {
		return r.etcdFailed(ctx, w, "adding "+m.Name+" as a learner", err)
	}
	r.event(w.cluster, false, "MemberAdded", "AddLearner", "Added %s to etcd as learner %s", m.Name, etcd.FormatID(added.ID))
	l := learned{added: added}
	return outcome{err: r.setInitialCluster(ctx, m, initialClusterFor(w.after(l), m)), learned: l}
}

// setInitialCluster records etcd's view of the membership on a member; from
// then on the member controller may start its Pod.
func (r *Reconciler) setInitialCluster(ctx context.Context, m *v1alpha2.EtcdMember, initial string) error {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.InitialCluster = initial
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[manifest.LabelComponent] = m.Name
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("recording initialCluster of %s: %w", m.Name, err)
	}
	return nil
}

// promote promotes the learner and records it as a voter.
func (r *Reconciler) promote(ctx context.Context, w *world, c *change) outcome {
	m := c.member
	err := r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error { return cl.MemberPromote(ctx, c.etcdID) })
	r.Metrics.MembershipOp(w.cluster, "promote", err)
	if err != nil {
		return r.etcdFailed(ctx, w, "promoting "+m.Name, err)
	}
	patch := client.MergeFrom(m.DeepCopy())
	m.Status.IsVoter = true
	if m.Status.MemberID == "" {
		// The member controller's own discovery may not have answered yet.
		m.Status.MemberID = etcd.FormatID(c.etcdID)
	}
	if err := r.Client.Status().Patch(ctx, m, patch); err != nil {
		return outcome{err: fmt.Errorf("recording %s as a voter: %w", m.Name, err)}
	}
	r.event(w.cluster, false, "MemberPromoted", "Promote", "Promoted learner %s to voter", m.Name)
	logf(ctx, w)("Promoted learner", "member", m.Name)
	return outcome{}
}
