package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// etcdRetry is how long to wait when etcd refuses a membership change because
// a voter joined or changed less than ~5s ago (its strict reconfiguration
// check), or a learner is still catching up. These are etcd's own timers;
// polling them briefly is the only way to know when they pass.
const etcdRetry = time.Second

// dial connects to the given members, or to every reachable voter.
func (r *Reconciler) dial(ctx context.Context, w *world, via []*v1alpha2.EtcdMember) (etcd.Client, error) {
	if via == nil {
		via = w.voterEndpoints()
	}
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, w.cluster, via)
	if err != nil {
		return nil, err
	}
	return r.Dial(ctx, cfg)
}

// withClient runs fn with a client of the cluster's voters.
func (r *Reconciler) withClient(ctx context.Context, w *world, fn func(context.Context, etcd.Client) error) error {
	c, err := r.dial(ctx, w, nil)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return fn(rctx, c)
}

// waitForLeavers holds every other change while a member is being removed:
// one membership change at a time. The member's deletion wakes us.
func (r *Reconciler) waitForLeavers(_ context.Context, w *world) (*ctrl.Result, error) {
	if leaving := w.leaving(); len(leaving) > 0 {
		w.working(conditions.ReasonScalingDown, fmt.Sprintf("Waiting for member %s to leave", leaving[0].Name))
		return done(), nil
	}
	return nil, nil
}

// readEtcd fetches etcd's membership through the voters for the steps that
// follow. With no member running (paused, or Pods not started yet) there is
// nobody to ask and those steps are skipped. If etcd cannot be reached, the
// pass stops with a short timer; members' readiness events usually bring us
// back sooner.
func (r *Reconciler) readEtcd(ctx context.Context, w *world) (*ctrl.Result, error) {
	if len(w.voterEndpoints()) == 0 {
		return nil, nil
	}
	if _, err := r.memberList(ctx, w, nil); err != nil {
		r.unreachable(w, err)
		logf(ctx, w)("Cannot reach etcd", "error", err.Error())
		return stop(5 * time.Second), nil
	}
	return nil, nil
}

// removeStrays removes etcd members no EtcdMember accounts for: a learner
// added just before its EtcdMember was deleted, say. One per pass, quorum
// first.
func (r *Reconciler) removeStrays(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.etcdMembers == nil {
		return nil, nil
	}
	for _, em := range w.etcdMembers.Members {
		if w.byPeerURL(em.PeerURLs) != nil {
			continue
		}
		name := strangerName(em)
		d := quorum.Remove(w.voters(), name)
		if !em.IsLearner && !d.OK {
			return r.refuse(w, d.Reason)
		}
		err := r.withClient(ctx, w, func(ctx context.Context, c etcd.Client) error { return c.MemberRemove(ctx, em.ID) })
		r.Metrics.MembershipOp(w.cluster, "remove", err)
		if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
			return r.retryable(ctx, w, "removing stray etcd member "+name, err)
		}
		r.event(w.cluster, false, conditions.ReasonRemovingStray, "RemoveMember", "Removed etcd member %s (%v) that no EtcdMember accounts for", name, em.PeerURLs)
		// etcd changed under no watch: look again at once.
		return stop(etcdRetry), nil
	}
	return nil, nil
}

// completePending makes etcd know a member the operator created: add it as a
// learner unless etcd already lists its peer URL, then record the membership
// as its initialCluster. Both steps are idempotent, so a crash anywhere is
// finished by the next pass.
func (r *Reconciler) completePending(ctx context.Context, w *world) (*ctrl.Result, error) {
	for _, m := range w.pending() {
		if m.Spec.Bootstrap {
			continue
		}
		return r.joinMember(ctx, w, m)
	}
	return nil, nil
}

func (r *Reconciler) joinMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember) (*ctrl.Result, error) {
	if w.etcdMembers == nil {
		w.working(conditions.ReasonScalingUp, fmt.Sprintf("Waiting for a running member to add %s through", m.Name))
		return done(), nil
	}
	w.working(conditions.ReasonScalingUp, fmt.Sprintf("Adding member %s", m.Name))
	if w.etcdMemberOf(m) == nil {
		if d := quorum.AddLearner(w.voters()); !d.OK {
			return r.refuse(w, d.Reason)
		}
		var added *etcd.Member
		err := r.withClient(ctx, w, func(ctx context.Context, c etcd.Client) error {
			var err error
			added, err = c.MemberAddAsLearner(ctx, []string{build.PeerURL(m)})
			return err
		})
		r.Metrics.MembershipOp(w.cluster, "add-learner", err)
		if err != nil {
			return r.retryable(ctx, w, "adding "+m.Name+" as a learner", err)
		}
		w.etcdMembers.Members = append(w.etcdMembers.Members, *added)
		r.event(w.cluster, false, "MemberAdded", "AddLearner", "Added %s to etcd as learner %s", m.Name, etcd.FormatID(added.ID))
	}
	if err := r.setInitialCluster(ctx, m, initialClusterFor(w, m)); err != nil {
		return nil, err
	}
	return done(), nil
}

// initialClusterFor renders --initial-cluster from etcd's own membership. A
// member that has not started yet has no name in etcd; the one joining now is
// named after its EtcdMember.
func initialClusterFor(w *world, joining *v1alpha2.EtcdMember) string {
	peers := map[string]string{}
	joiningURL := build.PeerURL(joining)
	for _, em := range w.etcdMembers.Members {
		if len(em.PeerURLs) == 0 {
			continue
		}
		name := em.Name
		switch {
		case em.PeerURLs[0] == joiningURL:
			name = joining.Name
		case name == "":
			if m := w.byPeerURL(em.PeerURLs); m != nil {
				name = m.Name
			}
		}
		if name != "" {
			peers[name] = em.PeerURLs[0]
		}
	}
	return build.InitialCluster(peers)
}

// promoteLearner promotes the learner once its applied index has caught up with
// the leader's, read through the Maintenance Status RPC.
func (r *Reconciler) promoteLearner(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.etcdMembers == nil {
		return nil, nil
	}
	for _, em := range w.etcdMembers.Members {
		if !em.IsLearner {
			continue
		}
		m := w.byPeerURL(em.PeerURLs)
		if m == nil || deleting(m) || m.Spec.Dormant {
			continue
		}
		return r.promote(ctx, w, m, em)
	}
	return nil, nil
}

func (r *Reconciler) promote(ctx context.Context, w *world, m *v1alpha2.EtcdMember, em etcd.Member) (*ctrl.Result, error) {
	w.working(conditions.ReasonPromotingLearner, fmt.Sprintf("Waiting for learner %s to catch up", m.Name))
	if m.Status.MemberID == "" {
		// The learner does not serve yet (its member controller learns its
		// ID from it the moment it does); that status change wakes us.
		return done(), nil
	}
	began := time.Now()
	caughtUp, err := r.caughtUp(ctx, w, m)
	log.FromContext(ctx).V(1).Info("Asked whether the learner caught up", "member", m.Name, "caughtUp", caughtUp, "error", err, "took", time.Since(began).String())
	if err != nil || !caughtUp {
		return stop(etcdRetry), nil
	}
	if d := quorum.Promote(w.voters(), m.Name, true); !d.OK {
		return r.refuse(w, d.Reason)
	}
	err = r.withClient(ctx, w, func(ctx context.Context, c etcd.Client) error { return c.MemberPromote(ctx, em.ID) })
	r.Metrics.MembershipOp(w.cluster, "promote", err)
	if err != nil {
		return r.retryable(ctx, w, "promoting "+m.Name, err)
	}
	patch := client.MergeFrom(m.DeepCopy())
	m.Status.IsVoter = true
	if err := r.Client.Status().Patch(ctx, m, patch); err != nil {
		return nil, fmt.Errorf("recording %s as a voter: %w", m.Name, err)
	}
	r.event(w.cluster, false, "MemberPromoted", "Promote", "Promoted learner %s to voter", m.Name)
	logf(ctx, w)("Promoted learner", "member", m.Name)
	// The member's status change brings the next pass.
	return done(), nil
}

// caughtUp compares the learner's applied index with the leader's. etcd itself
// accepts a learner within 90% of the leader's log; asking first avoids blind
// retries of MemberPromote.
func (r *Reconciler) caughtUp(ctx context.Context, w *world, learner *v1alpha2.EtcdMember) (bool, error) {
	var ok bool
	err := r.withClient(ctx, w, func(ctx context.Context, c etcd.Client) error {
		ls, err := c.Status(ctx, build.ClientURL(learner))
		if err != nil {
			return err
		}
		leader := w.byID(ls.Leader)
		if leader == nil {
			return fmt.Errorf("learner %s sees no leader it can name", learner.Name)
		}
		lead, err := c.Status(ctx, build.ClientURL(leader))
		if err != nil {
			return err
		}
		ok = ls.RaftAppliedIndex*10 >= lead.RaftAppliedIndex*9
		return nil
	})
	return ok, err
}

// byID finds the member etcd knows under an ID.
func (w *world) byID(id uint64) *v1alpha2.EtcdMember {
	for _, em := range w.etcdMembers.Members {
		if em.ID == id {
			return w.byPeerURL(em.PeerURLs)
		}
	}
	return nil
}

// refuse records that a step would break quorum and stops the pass; a
// member's health change brings us back.
func (r *Reconciler) refuse(w *world, reason string) (*ctrl.Result, error) {
	w.refused = reason
	w.working(conditions.ReasonRefused, "Holding membership changes: "+reason)
	r.event(w.cluster, true, conditions.ReasonRefused, "ProtectQuorum", "Refused a membership change: %s", reason)
	return done(), nil
}

// retryable handles an etcd error of a membership step: etcd's own timers are
// retried soon; anything else is logged and retried with a longer timer.
func (r *Reconciler) retryable(ctx context.Context, w *world, what string, err error) (*ctrl.Result, error) {
	if errors.Is(err, etcd.ErrUnhealthy) || errors.Is(err, etcd.ErrLearnerNotReady) {
		log.FromContext(ctx).V(1).Info("etcd asks to wait", "step", what, "error", err.Error())
		return stop(etcdRetry), nil
	}
	logf(ctx, w)("Membership step failed; retrying", "step", what, "error", err.Error())
	r.event(w.cluster, true, "MembershipStepFailed", "Retry", "%s failed (will retry): %v", what, err)
	return stop(5 * time.Second), nil
}
