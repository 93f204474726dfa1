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
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Every change of etcd's membership is made here, by the cluster controller,
// at most one per pass; the member controller never changes it. A pass of
// one cluster never runs concurrently with another pass of the same cluster
// (the controller's work queue guarantees it, and leader election keeps a
// single operator active), and each pass reads etcd's membership afresh
// before it decides. So whoever triggers a change (a scale, a repair, a user
// deleting several EtcdMembers at once) it is projected against the
// membership the previous change left.

// etcdRetry is how long to wait when etcd refuses a membership change because
// a voter joined or changed less than ~5s ago (its strict reconfiguration
// check), or a learner is still catching up. These are etcd's own timers;
// polling them briefly is the only way to know when they pass.
const etcdRetry = time.Second

// dial connects to the given members, or to the healthy voters.
func (r *Reconciler) dial(ctx context.Context, w *world, via []*v1alpha2.EtcdMember) (etcd.Client, error) {
	if via == nil {
		via = w.endpoints()
	}
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, w.cluster, via)
	if err != nil {
		return nil, err
	}
	return r.Dial(ctx, cfg)
}

// withClient runs fn with a client of the given members (nil: the healthy
// voters).
func (r *Reconciler) withClient(ctx context.Context, w *world, via []*v1alpha2.EtcdMember, fn func(context.Context, etcd.Client) error) error {
	c, err := r.dial(ctx, w, via)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return fn(rctx, c)
}

// readEtcd fetches etcd's membership for the steps that follow and checks
// that it is the cluster latched. With no member running (paused, or Pods not
// started yet) there is nobody to ask and those steps see no membership. If
// etcd cannot be reached the pass stops with a short timer; members'
// readiness events usually bring us back sooner.
func (r *Reconciler) readEtcd(ctx context.Context, w *world) (*ctrl.Result, error) {
	if len(w.endpoints()) == 0 {
		return nil, nil
	}
	list, err := r.memberList(ctx, w, nil)
	if err != nil {
		r.unreachable(w, err)
		logf(ctx, w)("Cannot reach etcd", "error", err.Error())
		// etcd is not watched: look again soon.
		return stop(5 * time.Second), nil
	}
	if id := etcd.FormatID(list.ClusterID); id != w.cluster.Status.ClusterID {
		w.mismatch = fmt.Sprintf("etcd answers as cluster %s, but this EtcdCluster latched cluster %s: no membership change is made. "+
			"If the latched ID is wrong (its status was edited or restored), remove status.clusterID and the operator recovers it from the members; "+
			"otherwise the members run a cluster that is not this one", id, w.cluster.Status.ClusterID)
		w.etcdMembers = nil
		r.warnOnce(w, conditions.ReasonClusterIDMismatch, "ReadMembership", w.mismatch)
		return done(), nil
	}
	return nil, nil
}

// refuse records that a change would break quorum. The Warning Event is
// emitted once per refusal, not once per retry; a member's health change
// brings us back.
func (r *Reconciler) refuse(w *world, reason string, about ...client.Object) {
	if w.refused == "" {
		w.refused = reason
	}
	w.working(conditions.ReasonRefused, "Holding membership changes: "+reason)
	r.warnOnce(w, conditions.ReasonRefused, "ProtectQuorum", reason, about...)
}

// retryable handles an etcd error of a membership step: etcd's own timers are
// retried soon; anything else is reported once and retried with a longer
// timer.
func (r *Reconciler) retryable(ctx context.Context, w *world, what string, err error) (*ctrl.Result, error) {
	if errors.Is(err, etcd.ErrUnhealthy) || errors.Is(err, etcd.ErrLearnerNotReady) {
		log.FromContext(ctx).V(1).Info("etcd asks to wait", "step", what, "error", err.Error())
		return stop(etcdRetry), nil
	}
	if r.authProblem(w, what, err) {
		// Retried on the longer timer: credentials change by hand.
		return stop(retryAuth), nil
	}
	logf(ctx, w)("Membership step failed; retrying", "step", what, "error", err.Error())
	msg := fmt.Sprintf("%s failed (will retry): %v", what, err)
	w.working("MembershipStepFailed", msg)
	r.warnOnce(w, "MembershipStepFailed", "Retry", msg)
	// Neither etcd nor its errors are watched: try again shortly.
	return stop(5 * time.Second), nil
}

// unreachable records that etcd could not be asked.
func (r *Reconciler) unreachable(w *world, err error) {
	w.unreachable = err
	r.authProblem(w, "ReadMembership", err)
}

// authProblem records (and reports once) an error that says etcd wants
// credentials the operator does not have. A cluster restored from a snapshot
// of one with auth may answer reads without them (with mutual TLS etcd takes
// the client certificate's name for the user) and refuse only a membership
// change.
func (r *Reconciler) authProblem(w *world, action string, err error) bool {
	c := w.cluster
	switch {
	case errors.Is(err, etcd.ErrAuthRequired) && !manifest.AuthWanted(c):
		w.authProblem = &progress{conditions.ReasonAuthRequiredNotConfigured,
			"etcd requires authentication, but spec.auth does not enable it (users were given to etcd by hand, or the cluster " +
				"was restored from a snapshot of one with auth): the operator cannot manage it without the root password"}
	case errors.Is(err, etcd.ErrAuthRequired) || errors.Is(err, etcd.ErrAuthFailed):
		w.authProblem = &progress{conditions.ReasonAuthCredentialsRejected,
			fmt.Sprintf("etcd refuses the root password the operator has (Secret %s, else Secret %s): %v",
				manifest.AppliedPasswordSecretName(c.Name), c.Spec.Auth.RootCredentialsSecretRef.Name, err)}
	default:
		return false
	}
	r.warnOnce(w, w.authProblem.reason, action, w.authProblem.message)
	return true
}

// memberList asks the given members (or the healthy voters) for etcd's
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

// status asks one member about itself.
func (r *Reconciler) status(ctx context.Context, w *world, m *v1alpha2.EtcdMember) (*etcd.Status, error) {
	var st *etcd.Status
	err := r.withClient(ctx, w, []*v1alpha2.EtcdMember{m}, func(ctx context.Context, c etcd.Client) error {
		var err error
		st, err = c.Status(ctx, manifest.ClientURL(m))
		return err
	})
	return st, err
}
