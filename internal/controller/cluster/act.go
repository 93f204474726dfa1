package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
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
}

// callTimeout bounds one etcd call of an action.
const callTimeout = 10 * time.Second

func (r *Reconciler) act(ctx context.Context, w *world, c *change) outcome {
	if c == nil {
		return outcome{}
	}
	switch c.kind {
	case latchStatus:
		w.cluster.Status = *c.status
		if c.reason != "" {
			r.event(w.cluster, false, c.reason, "Latch", "%s", c.message)
		}
		if warn := memoryStorageWarning(c.status.Observed); warn != "" && !equality.Semantic.DeepEqual(c.status.Observed, w.original.Status.Observed) {
			r.event(w.cluster, true, conditions.ReasonStorageTooSmall, "LatchTarget", "%s", warn)
		}
		return outcome{}
	case createSeed:
		seed, err := r.createMember(ctx, w, true)
		if err != nil {
			return outcome{err: err}
		}
		return outcome{err: r.completeSeed(ctx, seed, seed.Spec.InitialCluster)}
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
	case deleteMember:
		return r.deleteAndRemove(ctx, w, c)
	case setDormant, wake:
		return outcome{err: r.setDormant(ctx, w, c.member, c.kind == setDormant)}
	case restart:
		return r.restart(ctx, w, c)
	case enableDowngrade, cancelDowngrade:
		return r.downgrade(ctx, w, c)
	case enableAuth:
		return r.turnOnAuth(ctx, w)
	case forceNewCluster, fence, unfence, discard, clearForce:
		return outcome{err: r.actRecovery(ctx, w, c)}
	}
	return outcome{err: fmt.Errorf("unknown change %d", c.kind)}
}

// withClient runs fn with a client of the given members (nil: the healthy
// voters, else every member whose etcd may run).
func (r *Reconciler) withClient(ctx context.Context, w *world, via []*v1alpha2.EtcdMember, fn func(context.Context, etcd.Client) error) error {
	if via == nil {
		via = healthyVoters(w)
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

// healthyVoters are the members a change is sent through: the healthy
// voters, the leader first; else every member whose etcd may run.
func healthyVoters(w *world) []*v1alpha2.EtcdMember {
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
		w.features.auth = f
		return outcome{requeue: retryAuth}
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

// createMember creates a new member from the latched target (a joining one
// at a version the running cluster accepts) and records the expectation
// that the cache will show it. A seed is created with its initialCluster,
// so its Pod can start at once; with the join gate, a joiner is created with
// the membership it will join (its Pod starts at once, held by the gate).
func (r *Reconciler) createMember(ctx context.Context, w *world, seed bool) (*v1alpha2.EtcdMember, error) {
	m := manifest.NewMember(w.cluster, seed)
	if r.MemberName != nil {
		m.Name = r.MemberName(w.cluster.Name)
	}
	// The member controller's first step would add it; with it from the
	// start, that pass goes straight to the volume.
	controllerutil.AddFinalizer(m, manifest.MemberFinalizer)
	switch {
	case seed:
		m.Labels[manifest.LabelComponent] = m.Name
		m.Spec.InitialCluster = manifest.InitialCluster(map[string]string{m.Name: manifest.PeerURL(m)})
	case w.joinGate:
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationJoinCluster, joinClusterFor(w, m))
	}
	if !seed {
		m.Spec.Version = joinVersion(w)
	}
	if rec := w.cluster.Status.Recovery; seed && rec != nil && rec.Phase == v1alpha2.RecoveryRebootstrapping && rec.Restore != nil {
		// A cluster rebuilt from a snapshot (recover.go).
		m.Spec.Restore = rec.Restore.DeepCopy()
	}
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
func (r *Reconciler) completeSeed(ctx context.Context, seed *v1alpha2.EtcdMember, initial string) error {
	if !seed.Status.IsVoter {
		patch := client.MergeFrom(seed.DeepCopy())
		seed.Status.IsVoter = true
		if err := r.Client.Status().Patch(ctx, seed, patch); err != nil {
			return fmt.Errorf("recording seed %s as a voter: %w", seed.Name, err)
		}
	}
	if seed.Spec.InitialCluster == initial && seed.Labels[manifest.LabelComponent] == seed.Name {
		return nil
	}
	return r.setInitialCluster(ctx, seed, initial)
}

// createJoiner creates a member and, without the join gate, adds it to
// etcd in the same pass; with the gate, its Pod's address in the endpoints
// brings the add.
func (r *Reconciler) createJoiner(ctx context.Context, w *world) outcome {
	m, err := r.createMember(ctx, w, false)
	if err != nil || w.joinGate {
		return outcome{err: err}
	}
	return r.addLearner(ctx, w, m)
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
	w.etcd.list.Members = append(w.etcd.list.Members, *added)
	r.event(w.cluster, false, "MemberAdded", "AddLearner", "Added %s to etcd as learner %s", m.Name, etcd.FormatID(added.ID))
	return outcome{err: r.setInitialCluster(ctx, m, initialClusterFor(w, m))}
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

// removeFromEtcd removes one leaving member: a leader hands over its
// leadership, then etcd removes it, its Pod is deleted and the EtcdMember is
// released.
//
// The Pod keeps its role label to the end: its deletion takes it out of the
// client Service (a terminating Pod is no endpoint) and the budget counts a
// deleted voter as unavailable already (budgetCounts). Taking the label off
// first bought nothing, the endpoint update trailing the removal anyway, and
// cost the scale-down half a second a Pod on average: the write made the
// Pod's kubelet sync it just before the deletion arrived, and a kubelet
// starts a termination only once it has looked at the containers after its
// last sync (its relist, once a second).
func (r *Reconciler) removeFromEtcd(ctx context.Context, w *world, c *change) outcome {
	m := c.member
	if o, ok := r.handOver(ctx, w, m, c.handOver); !ok {
		return o
	}
	err := r.withClient(ctx, w, others(w, m), func(ctx context.Context, cl etcd.Client) error { return cl.MemberRemove(ctx, c.etcdID) })
	r.Metrics.MembershipOp(w.cluster, "remove", err)
	if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		return r.etcdFailed(ctx, w, "removing "+m.Name+" from etcd", err)
	}
	r.expect.removedFromEtcd(m.UID, w.now)
	r.event(w.cluster, false, "MemberRemoved", "RemoveMember", "Removed member %s (%s) from etcd", m.Name, etcd.FormatID(c.etcdID))
	r.event(m, false, "MemberRemoved", "RemoveMember", "Removed from etcd")
	logf(ctx, w)("Removed member from etcd", "member", m.Name, "memberID", etcd.FormatID(c.etcdID))
	r.stopPod(ctx, w, m)
	if err := r.release(ctx, w, m, ""); err != nil {
		return outcome{err: err}
	}
	// etcd changed under no watch; etcd also wants its voters connected
	// for a while before the next change. (A refusal asks to come back
	// at the same time: removed tells the two apart.)
	return outcome{requeue: etcdRetry, removed: m}
}

// stopPod deletes the Pod of a member etcd no longer lists, at once: the
// garbage collector would delete it only after the EtcdMember is gone, a
// second or more later on a busy control plane, and scaling down is done
// when the Pods are. Best effort: the garbage collector still follows.
func (r *Reconciler) stopPod(ctx context.Context, w *world, m *v1alpha2.EtcdMember) {
	pod := w.pods[m.Name]
	if pod == nil || pod.DeletionTimestamp != nil {
		return
	}
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		logf(ctx, w)("Could not delete the Pod of a removed member; the garbage collector will", "member", m.Name, "error", err.Error())
	}
}

// others are the members to send a change about m through.
func others(w *world, m *v1alpha2.EtcdMember) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, o := range healthyVoters(w) {
		if o != m {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// handOver moves etcd's leadership from m to the transferee, when m leads,
// through a client of m alone (etcd takes it only from the leader). It
// reports false with the outcome when the pass must stop.
func (r *Reconciler) handOver(ctx context.Context, w *world, m, to *v1alpha2.EtcdMember) (outcome, bool) {
	if to == nil {
		return outcome{}, true
	}
	target := w.etcdMemberOf(to)
	if target == nil {
		return outcome{}, true
	}
	err := r.withClient(ctx, w, []*v1alpha2.EtcdMember{m}, func(ctx context.Context, c etcd.Client) error {
		return c.MoveLeader(ctx, target.ID)
	})
	r.Metrics.MembershipOp(w.cluster, "move-leader", err)
	if err != nil {
		return r.etcdFailed(ctx, w, "moving leadership from "+m.Name+" to "+to.Name, err), false
	}
	r.event(w.cluster, false, "LeadershipMoved", "MoveLeader", "Moved leadership from %s to %s", m.Name, to.Name)
	return outcome{}, true
}

// release drops the member's finalizer: etcd no longer lists it, so the
// EtcdMember, its Pod and its PVC may go.
func (r *Reconciler) release(ctx context.Context, w *world, m *v1alpha2.EtcdMember, why string) error {
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, manifest.MemberFinalizer)
	if err := r.Client.Patch(ctx, m, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing member %s: %w", m.Name, err)
	}
	if why != "" {
		logf(ctx, w)("Released member without changing etcd", "member", m.Name, "why", why)
	}
	return nil
}

// removeStray removes an etcd member no EtcdMember accounts for.
func (r *Reconciler) removeStray(ctx context.Context, w *world, c *change) outcome {
	err := r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error { return cl.MemberRemove(ctx, c.etcdID) })
	r.Metrics.MembershipOp(w.cluster, "remove", err)
	if err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		return r.etcdFailed(ctx, w, "removing stray etcd member "+c.message, err)
	}
	r.event(w.cluster, false, conditions.ReasonRemovingStray, "RemoveMember", "Removed etcd member %s that no EtcdMember accounts for", c.message)
	// etcd changed under no watch: look again at once.
	return outcome{requeue: etcdRetry}
}

// deleteAndRemove deletes the member and, when the change says so (a
// scale-down), removes it from etcd in the same pass. A removal etcd made of
// a member that did not lead lets the pass go on to the next (see goOn).
func (r *Reconciler) deleteAndRemove(ctx context.Context, w *world, c *change) outcome {
	if err := r.deleteMember(ctx, w, c.member, c.reason, c.message); err != nil || !c.thenRemove {
		return outcome{err: err}
	}
	o := r.removeFromEtcd(ctx, w, c)
	if c.handOver != nil || w.leaderMember() == c.member {
		o.removed = nil
	}
	return o
}

// deleteMember deletes an EtcdMember the operator gives up; a later pass
// removes it from etcd (removeFromEtcd) and releases its finalizer.
func (r *Reconciler) deleteMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember, reason, message string) error {
	// Its Pod is left as it is (see removeFromEtcd): the budget counts
	// a deleted voter as unavailable from here on.
	if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting member %s: %w", m.Name, err)
	}
	// The rest of the pass (the budget) sees it leaving, as the API does.
	now := metav1.NewTime(w.now)
	m.DeletionTimestamp = &now
	r.expect.deleted(client.ObjectKeyFromObject(w.cluster).String(), m.Name, w.now)
	r.event(w.cluster, false, reason, "DeleteMember", "%s", message)
	logf(ctx, w)("Deleting member", "member", m.Name, "reason", reason)
	return nil
}

// setDormant pauses or wakes a member: a dormant member has no Pod but keeps
// its volume and identity, so waking it resumes the same etcd member.
func (r *Reconciler) setDormant(ctx context.Context, w *world, m *v1alpha2.EtcdMember, dormant bool) error {
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.Dormant = dormant
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("setting dormant=%t on %s: %w", dormant, m.Name, err)
	}
	if dormant {
		r.event(w.cluster, false, conditions.ReasonPaused, "Pause", "Paused the cluster: member %s is dormant, its volume is kept", m.Name)
	} else {
		r.event(w.cluster, false, conditions.ReasonResuming, "Resume", "Resuming dormant member %s", m.Name)
	}
	return nil
}

// restart brings one member to the target: leadership handed over if it
// leads, its spec re-templated, its Pod evicted through the Eviction API
// (the PodDisruptionBudget has the last word, so a concurrent drain cannot
// take a second voter), and the member controller makes a new one from the
// new spec on the same claim.
func (r *Reconciler) restart(ctx context.Context, w *world, c *change) outcome {
	m := c.member
	if o, ok := r.handOver(ctx, w, m, c.handOver); !ok {
		return o
	}
	if !podOutdated(w, m) {
		// Its Pod runs its spec: move the spec one step on (with changed
		// Secrets too, so that one restart brings both).
		if err := r.nextTemplate(ctx, w, m); err != nil {
			return outcome{err: err}
		}
	}
	pod := w.pods[m.Name]
	changed := w.changedSecrets(m)
	if pod == nil || pod.DeletionTimestamp != nil || (!podOutdated(w, m) && len(changed) == 0) {
		// Only the storage size changed (grown in place), or the Pod is
		// already going.
		return outcome{}
	}
	cause, why := v1alpha2.RollOutCauseSpec, fmt.Sprintf("on the new target (etcd %s)", m.Spec.Version)
	if !podOutdated(w, m) {
		cause, why = v1alpha2.RollOutCauseSecrets, fmt.Sprintf("to load changed certificate material (Secret %s)", strings.Join(changed, ", "))
	}
	if o, ok := r.evict(ctx, pod); !ok {
		return o
	}
	recordRestart(w, m, cause, why)
	r.event(w.cluster, false, conditions.ReasonRollingOut, "Restart", "Restarting member %s %s", m.Name, why)
	r.event(m, false, conditions.ReasonRollingOut, "Restart", "Restarting %s", why)
	logf(ctx, w)("Restarting member for the roll-out", "member", m.Name, "version", m.Spec.Version, "cause", cause)
	// The Pod's deletion and the new Pod's readiness bring the next pass.
	return outcome{}
}

// evict asks the API server to evict the Pod, which it does only while the
// PodDisruptionBudget allows a disruption. It reports false with the outcome
// when the budget refused.
func (r *Reconciler) evict(ctx context.Context, pod *corev1.Pod) (outcome, bool) {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := r.Client.SubResource("eviction").Create(ctx, pod, ev)
	switch {
	case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return outcome{}, true
	case apierrors.IsTooManyRequests(err):
		// The budget's status is not watched: look again shortly.
		return outcome{progress: &finding{conditions.ReasonRollingOut, fmt.Sprintf(
			"The roll-out waits: the PodDisruptionBudget allows no disruption of %s now (another voluntary disruption, a drain say, is under way)", pod.Name)},
			requeue: unreachableRetry}, false
	}
	return outcome{err: fmt.Errorf("evicting pod %s: %w", pod.Name, err)}, false
}

// recordRestart notes a restart in status.lastRollOut, starting a new
// record when the last one completed.
func recordRestart(w *world, m *v1alpha2.EtcdMember, cause, why string) {
	lr := w.cluster.Status.LastRollOut
	if lr == nil || lr.CompletionTime != nil {
		lr = &v1alpha2.RollOutStatus{StartTime: metav1.Time{Time: w.now}}
		w.cluster.Status.LastRollOut = lr
	}
	if lr.Cause != cause {
		// A roll for both records the spec; the Secrets ride along.
		if lr.Cause == "" || cause == v1alpha2.RollOutCauseSpec {
			lr.Cause = cause
		}
	}
	if !strings.Contains(lr.Message, why) {
		if lr.Message != "" {
			lr.Message += "; "
		}
		lr.Message += "restarted " + why
	}
	if !slices.Contains(lr.Restarted, m.Name) {
		lr.Restarted = append(lr.Restarted, m.Name)
	}
}

// nextTemplate moves a member's spec one step towards the target: to the
// target itself, or first, when etcd needs it (3.6 to 3.7), to a restart on
// its current version that takes a snapshot at once.
func (r *Reconciler) nextTemplate(ctx context.Context, w *world, m *v1alpha2.EtcdMember) error {
	patch := client.MergeFrom(m.DeepCopy())
	from, ferr := version.Parse(m.Status.Version)
	to, terr := version.Parse(w.cluster.Status.Observed.Version)
	switch {
	case ferr == nil && terr == nil && version.SnapshotFirst(from, to) && m.Annotations[manifest.AnnotationSnapshotCount] == "":
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationSnapshotCount, "1")
		r.event(m, false, conditions.ReasonRollingOut, "Snapshot", "Restarting on %s with --snapshot-count=1 first: etcd %s cannot replay raft log entries older than a 3.6 snapshot", from, to)
	case !manifest.Retemplate(m, w.cluster.Status.Observed):
		return nil
	}
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("re-templating member %s: %w", m.Name, err)
	}
	return nil
}

// downgrade enables etcd's downgrade to a target one minor down (so that
// members of the older minor may run; the roll follows), or cancels one for
// a target that is no longer down.
func (r *Reconciler) downgrade(ctx context.Context, w *world, c *change) outcome {
	target, err := version.Parse(c.version)
	if err != nil {
		return outcome{err: err}
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		if c.kind == cancelDowngrade {
			_, err := cl.Downgrade(ctx, etcd.DowngradeCancel, target.String())
			return err
		}
		if _, err := cl.Downgrade(ctx, etcd.DowngradeValidate, target.String()); err != nil {
			return err
		}
		_, err := cl.Downgrade(ctx, etcd.DowngradeEnable, target.String())
		return err
	})
	op, what := "downgrade-enable", "enabling etcd's downgrade to "+target.MinorString()
	if c.kind == cancelDowngrade {
		op, what = "downgrade-cancel", "cancelling etcd's downgrade to "+target.MinorString()
	}
	r.Metrics.MembershipOp(w.cluster, op, err)
	nothingToCancel := c.kind == cancelDowngrade && err != nil && strings.Contains(err.Error(), "no inflight downgrade job")
	if err != nil && !nothingToCancel {
		return r.etcdFailed(ctx, w, what, err)
	}
	if c.kind == cancelDowngrade {
		r.event(w.cluster, false, "DowngradeCancelled", "Downgrade", "Cancelled etcd's downgrade to %s: the target is %s", target.MinorString(), w.cluster.Status.Observed.Version)
	} else {
		r.event(w.cluster, false, "DowngradeEnabled", "Downgrade", "Enabled etcd's downgrade to %s; members are rolled to %s next", target.MinorString(), target)
	}
	// etcd changes its cluster version on its own: look again shortly.
	return outcome{requeue: etcdRetry}
}
