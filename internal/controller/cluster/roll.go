package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// settle is how long a restarted member must have been Ready before the
// next one restarts: etcd's own health interval, so the member is connected
// to its peers again and counts in etcd's checks.
const settle = 5 * time.Second

// The roll-out: when the latched target differs from what running members
// were made from (version, resources, options, scheduling, metadata,
// storage size), members are brought to it one at a time. A member keeps its
// name, claim and etcd identity: its spec is re-templated and its Pod
// restarted on the same claim (a memory-backed member, whose data would go
// with its Pod, is replaced through the learner path instead). Followers go
// first, the leader last after handing its leadership over; each restart only
// when the rest keep a quorum, the next only once the previous is Ready again
// and settled. Everything is derived from the members and their Pods, so an
// operator that dies at any point resumes without restarting members already
// done.

// rollOut makes one roll-out step, when the membership is otherwise settled.
func (r *Reconciler) rollOut(ctx context.Context, w *world) (*ctrl.Result, error) {
	if !readyToRoll(w) {
		return nil, nil
	}
	outdated := outdated(w)
	if len(outdated) == 0 {
		// The last member restarted must come back before the roll is
		// done (or, past the deadline, is reported stuck).
		if res := r.waitSettled(w); res != nil {
			return res, nil
		}
		if lr := w.cluster.Status.LastRollOut; lr != nil && lr.CompletionTime == nil {
			lr.CompletionTime = &metav1.Time{Time: w.now}
			r.event(w.cluster, false, conditions.ReasonRollingOut, "RollOut", "Roll-out complete: %d members restarted (%s)", len(lr.Restarted), lr.Message)
		}
		return r.checkClusterVersion(ctx, w)
	}
	if res, err, halt := r.versionGate(ctx, w); halt {
		return res, err
	}
	if res := r.waitSettled(w); res != nil {
		return res, nil
	}
	if w.secretProblem != "" {
		// A restarted member could not start again.
		w.working(conditions.ReasonSecretMissing, "The roll-out waits: "+w.secretProblem)
		return done(), nil
	}
	m := r.nextToRoll(ctx, w, outdated)
	w.working(conditions.ReasonRollingOut, fmt.Sprintf("%d of %d members up to date; rolling %s", w.desired()-len(outdated), w.desired(), m.Name))
	if m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory {
		// Its data lives in the Pod: replace it, a new member joins from the
		// target as a learner.
		if d := quorum.Remove(w.voters(), m.Name); !d.OK {
			r.refuse(w, fmt.Sprintf("rolling %s waits: %s", m.Name, d.Reason))
			return done(), nil
		}
		return r.deleteMember(ctx, w, m, conditions.ReasonRollingOut, fmt.Sprintf("Replacing memory-backed member %s to roll out the new target", m.Name))
	}
	return r.restartMember(ctx, w, m)
}

// readyToRoll: the cluster formed, has exactly its members, none leaving,
// pending or learning: scaling and repair come first.
func readyToRoll(w *world) bool {
	return w.etcdMembers != nil && w.cluster.Status.ClusterID != "" && len(w.running()) == w.desired() &&
		len(w.leaving()) == 0 && len(w.pending()) == 0 && w.learner() == nil
}

// outdated lists the running members whose spec is older than the target,
// or whose Pod was made from an older spec than theirs, or whose claim is
// still growing.
func outdated(w *world) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, m := range w.running() {
		if !w.upToDate(m) {
			out = append(out, m)
		}
	}
	return out
}

// podOutdated reports whether the member's Pod was not made from the
// member's spec as it is: another template hash, or none (a Pod from before
// hashes, which a restart brings up to date).
func podOutdated(w *world, m *v1alpha2.EtcdMember) bool {
	pod := w.pods[m.Name]
	return pod != nil && pod.Annotations[manifest.AnnotationTemplateHash] != manifest.TemplateHash(m)
}

// waitSettled holds the roll while a member is not Ready, or became Ready
// less than the settle period ago. A restarted member that does not come
// back within the progress deadline stops the roll: Degraded names it with
// its last log lines.
func (r *Reconciler) waitSettled(w *world) *ctrl.Result {
	for _, m := range w.running() {
		if !ready(m) || !w.isVoter(m) {
			if overdue(w) {
				w.stuck = fmt.Sprintf("the roll-out stopped: member %s is not ready on %s: %s", m.Name, m.Spec.Version, r.lastWords(w, m))
				r.warnOnce(w, conditions.ReasonRollOutStuck, "RollOut", w.stuck, m)
			}
			w.working(conditions.ReasonRollingOut, fmt.Sprintf("Waiting for member %s to be ready before rolling the next", m.Name))
			return done()
		}
		c := conditions.Get(m.Status.Conditions, conditions.Ready)
		if since := w.now.Sub(c.LastTransitionTime.Time); since < settle {
			w.working(conditions.ReasonRollingOut, fmt.Sprintf("Letting member %s settle before rolling the next", m.Name))
			// Readiness does not change again to wake us: wait it out.
			return stop(settle - since)
		}
	}
	return nil
}

// lastWords is what the member's etcd said last before it stopped, or why
// its container does not run.
func (r *Reconciler) lastWords(w *world, m *v1alpha2.EtcdMember) string {
	pod := w.pods[m.Name]
	if pod == nil {
		return "its Pod is gone"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; t != nil && t.Message != "" {
			return lastLines(t.Message, 3)
		}
		if t := cs.State.Terminated; t != nil && t.Message != "" {
			return lastLines(t.Message, 3)
		}
		if wt := cs.State.Waiting; wt != nil {
			return wt.Reason + ": " + wt.Message
		}
	}
	if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil {
		return c.Message
	}
	return "no reason reported"
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// nextToRoll picks followers first (oldest first) and the leader last.
func (r *Reconciler) nextToRoll(ctx context.Context, w *world, outdated []*v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	leader := r.leaderOf(ctx, w)
	ordered := newest(outdated)
	for i := len(ordered) - 1; i >= 0; i-- {
		if ordered[i] != leader {
			return ordered[i]
		}
	}
	return ordered[0]
}

// leaderOf asks a member which member leads.
func (r *Reconciler) leaderOf(ctx context.Context, w *world) *v1alpha2.EtcdMember {
	for _, m := range w.endpoints() {
		if st, err := r.status(ctx, w, m); err == nil && st.Leader != 0 {
			return w.byID(st.Leader)
		}
	}
	return nil
}

// restartMember brings one member to the target: quorum first, leadership
// handed over if it leads, its spec re-templated, its Pod deleted (the member
// controller starts a new one from the new spec on the same claim). Each of
// these is idempotent and checked afresh, so a crash between them is
// finished by the next pass.
func (r *Reconciler) restartMember(ctx context.Context, w *world, m *v1alpha2.EtcdMember) (*ctrl.Result, error) {
	if d := quorum.Restart(w.voters(), m.Name); !d.OK {
		r.refuse(w, fmt.Sprintf("rolling %s waits: %s", m.Name, d.Reason))
		return done(), nil
	}
	if em := w.etcdMemberOf(m); em != nil && !em.IsLearner {
		if res, err := r.handOverLeadership(ctx, w, m, *em); res != nil || err != nil {
			return res, err
		}
	}
	if !podOutdated(w, m) {
		// Its Pod runs its spec: move the spec one step on (with changed
		// Secrets too, so that one restart brings both).
		if err := r.nextTemplate(ctx, w, m); err != nil {
			return nil, err
		}
	}
	pod := w.pods[m.Name]
	changed := w.changedSecrets(m)
	if pod == nil || pod.DeletionTimestamp != nil || (!podOutdated(w, m) && len(changed) == 0) {
		// Only the storage size changed (grown in place), or the Pod is
		// already going.
		return done(), nil
	}
	cause, why := v1alpha2.RollOutCauseSpec, fmt.Sprintf("on the new target (etcd %s)", m.Spec.Version)
	if !podOutdated(w, m) {
		cause, why = v1alpha2.RollOutCauseSecrets, fmt.Sprintf("to load changed certificate material (Secret %s)", strings.Join(changed, ", "))
	}
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return nil, fmt.Errorf("restarting member %s: %w", m.Name, err)
	}
	recordRestart(w, m, cause, why)
	r.event(w.cluster, false, conditions.ReasonRollingOut, "Restart", "Restarting member %s %s", m.Name, why)
	r.event(m, false, conditions.ReasonRollingOut, "Restart", "Restarting %s", why)
	logf(ctx, w)("Restarting member for the roll-out", "member", m.Name, "version", m.Spec.Version, "cause", cause)
	// The Pod's deletion and the new Pod's readiness bring the next pass.
	return done(), nil
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

// versionGate refuses a version change etcd's upgrade rules do not allow,
// before any member is touched, and starts etcd's downgrade for a minor
// downgrade. It halts the pass when it refused or acted.
func (r *Reconciler) versionGate(ctx context.Context, w *world) (*ctrl.Result, error, bool) {
	target, err := version.Parse(w.cluster.Status.Observed.Version)
	if err != nil {
		return nil, err, true
	}
	var running []version.Version
	for _, m := range w.running() {
		v := m.Status.Version
		if v == "" {
			v = m.Spec.Version
		}
		if pv, err := version.Parse(v); err == nil {
			running = append(running, pv)
		}
	}
	cluster, downgrading := r.clusterVersion(ctx, w)
	plan := version.Decide(running, cluster, target)
	switch {
	case plan.Refused != "":
		w.blockedVersion = fmt.Sprintf("version %s refused: %s", target, plan.Refused)
		r.warnOnce(w, conditions.ReasonVersionChangeRefused, "CheckVersion", w.blockedVersion)
		return done(), nil, true
	case plan.Kind == version.MinorDown && !downgrading:
		return r.enableDowngrade(ctx, w, target)
	case plan.Kind == version.MinorDown && cluster != target.MinorString():
		// etcd lowers its cluster version a few seconds after the
		// downgrade is enabled, and only while every member answers: a
		// member restarted on the older minor before that cannot join (the
		// cluster version is newer than it), and with it down etcd never
		// lowers the version.
		w.working(conditions.ReasonRollingOut, fmt.Sprintf("Waiting for etcd to lower its cluster version from %s to %s before the first member restarts", cluster, target.MinorString()))
		return stop(2 * time.Second), nil, true
	}
	return nil, nil, false
}

// clusterVersion reads etcd's cluster version and whether a downgrade is
// under way.
func (r *Reconciler) clusterVersion(ctx context.Context, w *world) (string, bool) {
	var cv string
	var downgrading bool
	for _, m := range w.endpoints() {
		err := r.withClient(ctx, w, []*v1alpha2.EtcdMember{m}, func(ctx context.Context, c etcd.Client) error {
			var err error
			if cv, err = c.ClusterVersion(ctx, manifest.ClientURL(m)); err != nil {
				return err
			}
			st, err := c.Status(ctx, manifest.ClientURL(m))
			if err == nil {
				downgrading = st.DowngradeTarget != ""
			}
			return err
		})
		if err == nil {
			w.cluster.Status.ClusterVersion = cv
			return cv, downgrading
		}
	}
	return "", false
}

// enableDowngrade asks etcd to lower its cluster version by one minor, so
// that members of the older minor may run; the roll follows.
func (r *Reconciler) enableDowngrade(ctx context.Context, w *world, target version.Version) (*ctrl.Result, error, bool) {
	err := r.withClient(ctx, w, nil, func(ctx context.Context, c etcd.Client) error {
		if _, err := c.Downgrade(ctx, etcd.DowngradeValidate, target.String()); err != nil {
			return err
		}
		_, err := c.Downgrade(ctx, etcd.DowngradeEnable, target.String())
		return err
	})
	r.Metrics.MembershipOp(w.cluster, "downgrade-enable", err)
	if err != nil {
		res, rerr := r.retryable(ctx, w, "enabling etcd's downgrade to "+target.MinorString(), err)
		return res, rerr, true
	}
	r.event(w.cluster, false, "DowngradeEnabled", "Downgrade", "Enabled etcd's downgrade to %s; members are rolled to %s next", target.MinorString(), target)
	// etcd lowers its cluster version on its own: look again shortly.
	return stop(etcdRetry), nil, true
}

// checkClusterVersion, once every member runs the target, waits until etcd's
// cluster version reached the target's minor (etcd raises it by itself a
// moment after the last member), and records it. It costs an etcd call only
// while the recorded version differs from the target's.
func (r *Reconciler) checkClusterVersion(ctx context.Context, w *world) (*ctrl.Result, error) {
	target, err := version.Parse(w.cluster.Status.Observed.Version)
	if err != nil || w.cluster.Status.ClusterVersion == target.MinorString() {
		return nil, nil
	}
	if cv, _ := r.clusterVersion(ctx, w); cv == target.MinorString() {
		return nil, nil
	}
	w.working(conditions.ReasonRollingOut, fmt.Sprintf("Every member runs %s; waiting for etcd's cluster version to reach %s", target, target.MinorString()))
	// etcd's cluster version is not watched: look again shortly.
	return stop(2 * time.Second), nil
}
