package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The actions: every write the cluster controller makes to the API server
// and to etcd's membership, named for what it does. act carries out the one
// change of a plan. Each action is idempotent and reads nothing it decides
// on (the planner decided), so an operator killed between any two of its
// calls is finished by the next pass, which observes afresh.

// outcome is what carrying out a change came to.
type outcome struct {
	// err is an API error: the pass fails and is retried with backoff.
	err error
	// progress replaces the plan's when the change failed or must wait.
	progress *finding
	// warn emits progress as a Warning Event, once.
	warn bool
	// requeue is when to look again, for a timer no watch replaces.
	requeue time.Duration
	// removed is the member a scale-down took out of etcd and released,
	// when it was not the leader: the world can be brought up to date
	// without asking again (see goOn). Only a removal etcd made sets it.
	removed *v1alpha2.EtcdMember
	// learned is what the rest of the pass must see (world.after).
	learned learned
}

// callTimeout bounds one etcd call of an action.
const callTimeout = 10 * time.Second

func (r *Reconciler) act(ctx context.Context, w *world, c *change) outcome {
	if c == nil {
		return outcome{}
	}
	switch c.kind {
	case latchStatus:
		if c.reason != "" {
			r.event(w.cluster, false, c.reason, "Latch", "%s", c.message)
		}
		if warn := memoryStorageWarning(c.status.Observed); warn != "" && !equality.Semantic.DeepEqual(c.status.Observed, w.original.Status.Observed) {
			r.event(w.cluster, true, conditions.ReasonStorageTooSmall, "LatchTarget", "%s", warn)
		}
		return outcome{learned: learned{latched: c.status}}
	case createSeed:
		seed, err := r.createMember(ctx, w, true)
		if err != nil {
			return outcome{err: err}
		}
		return outcome{err: r.completeSeed(ctx, seed, seed.Spec.InitialCluster), learned: learned{created: seed}}
	case completeSeed:
		return outcome{err: r.completeSeed(ctx, c.member, c.initial)}
	case createJoiner:
		return r.createJoiner(ctx, w)
	case addLearner:
		return r.addLearner(ctx, w, c.member)
	case recordJoined:
		return outcome{err: r.setInitialCluster(ctx, c.member, c.initial)}
	case promote:
		return r.promote(ctx, w, c)
	case removeFromEtcd:
		o := r.removeFromEtcd(ctx, w, c)
		o.removed = nil
		return o
	case release:
		return outcome{err: r.release(ctx, w, c.member, c.message)}
	case removeStray:
		return r.removeStray(ctx, w, c)
	case deleteMember, moveApart:
		return r.deleteAndRemove(ctx, w, c)
	case setDormant, wake:
		return outcome{err: r.setDormant(ctx, w, c.member, c.kind == setDormant)}
	case restart:
		return r.restart(ctx, w, c)
	case completeRollOut:
		return r.completeRollOut(w, c)
	case enableDowngrade, cancelDowngrade:
		return r.downgrade(ctx, w, c)
	case enableAuth:
		return r.turnOnAuth(ctx, w)
	case forceNewCluster, fence, unfence, discard, clearForce:
		return outcome{err: r.actRecovery(ctx, w, c)}
	case takeSnapshot:
		return outcome{err: r.takeSnapshot(ctx, w, c)}
	}
	return outcome{err: fmt.Errorf("unknown change %d", c.kind)}
}

// withClient runs fn with a client of the given members (nil: the healthy
// voters, else every member whose etcd may run).
func (r *Reconciler) withClient(ctx context.Context, w *world, via []*v1alpha2.EtcdMember, fn func(context.Context, etcd.Client) error) error {
	if via == nil {
		via = dialVoters(w)
	}
	c, err := r.dial(ctx, w, via)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return fn(rctx, c)
}

// dialVoters are the members a change is sent through: the healthy
// voters, the leader first; else every member whose etcd may run.
func dialVoters(w *world) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	if lm := w.leaderMember(); lm != nil && w.healthy(lm) {
		out = append(out, lm)
	}
	for _, m := range w.inEtcd() {
		if m != w.leaderMember() && w.isVoter(m) && w.serves(m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return w.inEtcd()
	}
	return out
}

// etcdFailed turns an etcd error of a membership step into an outcome:
// etcd's own timers are retried soon; credentials are reported; anything
// else is reported once and retried with a longer timer.
func (r *Reconciler) etcdFailed(ctx context.Context, w *world, what string, err error) outcome {
	if errors.Is(err, etcd.ErrUnhealthy) || errors.Is(err, etcd.ErrLearnerNotReady) {
		log.FromContext(ctx).V(1).Info("etcd asks to wait", "step", what, "error", err.Error())
		return outcome{requeue: etcdRetry}
	}
	if f := credentialsProblem(w.cluster, err); f != nil {
		// Retried on the longer timer: credentials change by hand.
		return outcome{requeue: retryAuth, learned: learned{auth: f}}
	}
	logf(ctx, w)("Membership step failed; retrying", "step", what, "error", err.Error())
	return outcome{progress: &finding{"MembershipStepFailed", fmt.Sprintf("%s failed (will retry): %v", what, err)}, warn: true, requeue: unreachableRetry}
}

// credentialsProblem says how an error shows that etcd wants credentials
// the operator does not have, or nil. A cluster restored from a snapshot of
// one with auth may answer reads without them (with mutual TLS etcd takes the
// client certificate's name for the user) and refuse only a membership
// change.
func credentialsProblem(c *v1alpha2.EtcdCluster, err error) *finding {
	switch {
	case errors.Is(err, etcd.ErrAuthRequired) && !manifest.AuthWanted(c):
		return &finding{conditions.ReasonAuthRequiredNotConfigured,
			"etcd requires authentication, but spec.auth does not enable it (users were given to etcd by hand, or the cluster " +
				"was restored from a snapshot of one with auth): the operator cannot manage it without the root password"}
	case errors.Is(err, etcd.ErrAuthRequired) || errors.Is(err, etcd.ErrAuthFailed):
		return &finding{conditions.ReasonAuthCredentialsRejected,
			fmt.Sprintf("etcd refuses the root password the operator has (Secret %s, else Secret %s): %v",
				manifest.AppliedPasswordSecretName(c.Name), c.Spec.Auth.RootCredentialsSecretRef.Name, err)}
	}
	return nil
}
