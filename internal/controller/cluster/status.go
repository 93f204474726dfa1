package cluster

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// Who writes each field of EtcdClusterStatus (the same is said beside
// each field's declaration). Three channels lead to the one write
// (report's merge patch): a latch (a latchStatus change, whose status the
// planner builds: target.go, bootstrap.go, recover.go), an action's
// outcome (learned, folded in by world.after; maintain's auth step
// returns one too), and report itself, from the world and the plan. Each
// field has one channel. The one exception is the latch that starts a
// cluster over from a snapshot (removeEveryMember): the etcd cluster it
// describes is gone, so it also clears clusterVersion and authEnabled.
//
//	readyMembers, updatedMembers, selector,  report, from the world
//	brokenMembers, noLeaderSince, lastReports
//	clusterVersion                             report, from etcd's reading
//	                                           (observe, world.clusterVersion)
//	maintenanceLock                            report (updateLock)
//	conditions                                 report (a latch's Progressing
//	                                           comes from its plan's progress)
//	recovery                                   report, from the plan
//	clusterID, clusterToken, observed,         the latches
//	progressDeadline
//	lastRollOut                                the roll's outcomes (restart,
//	                                           completeRollOut)
//	authEnabled                                the auth step's outcome
//	                                           (turnOnAuth; syncAuth finding
//	                                           it on already)

// report sets the status from the world, the plan and its outcome, emits
// the Warning Events of what the plan held back (once per episode), and
// writes the status only when it changed, so a steady cluster costs no
// writes.
func (r *Reconciler) report(ctx context.Context, w *world, p plan, o outcome) error {
	if o.progress != nil {
		p.progress = *o.progress
	}
	r.announce(w, p, o)
	st := &w.cluster.Status
	if p.recoverySet && o.err == nil {
		r.announceRecovery(w, p.recovery)
		st.Recovery = p.recovery
	}
	if w.etcd.clusterVersion != "" {
		st.ClusterVersion = w.etcd.clusterVersion
	}
	st.ReadyMembers = int32(w.healthyVoters())
	st.UpdatedMembers = int32(w.updated())
	st.Selector = manifest.SelectorString(w.cluster.Name)
	st.BrokenMembers = int32(len(w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && lost(m) })))
	st.NoLeaderSince = noLeaderSince(w)
	st.LastReports = lastReports(w)
	if !w.handover.active {
		// The client certificate members trust the operator by; during a
		// hand-over, the one from before stays recorded.
		st.OperatorClientSecret = etcdconn.OperatorClientSecret(w.cluster)
	}
	setAvailable(w, p)
	setProgressing(w, p)
	setDegraded(w, p)
	setTLSHandover(w)
	setMembersApart(w, p)
	r.updateLock(ctx, w, p)
	if equality.Semantic.DeepEqual(w.original.Status, w.cluster.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, w.cluster, client.MergeFrom(w.original)); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	r.expect.wroteStatus(client.ObjectKeyFromObject(w.cluster).String(), w.original.ResourceVersion, w.cluster.ResourceVersion, w.now)
	return nil
}

// announce emits a Warning Event for each problem the status reports, once
// per episode (see warnOnce).
func (r *Reconciler) announce(w *world, p plan, o outcome) {
	if p.hold != nil {
		r.warnOnce(w, p.hold.reason, "Hold", p.hold.message)
	}
	if f := authProblem(w); f != nil {
		r.warnOnce(w, f.reason, "Authenticate", f.message)
	}
	if msg := w.features.certManagerMissing; msg != "" && p.hold == nil {
		r.warnOnce(w, conditions.ReasonCertManagerNotInstalled, "CreateCertificates", msg)
	}
	for _, msg := range w.features.foreignCertificates {
		r.warnOnce(w, conditions.ReasonCertificateNotOwned, "CreateCertificates", msg)
	}
	if h := w.handover; h.blocked != "" {
		r.warnOnce(w, conditions.ReasonHandoverBlocked, "HandOverTLS", h.blocked)
	} else if c := conditions.Get(w.original.Status.Conditions, conditions.TLSHandover); c != nil && c.Status == metav1.ConditionTrue && !h.active {
		r.event(w.cluster, false, conditions.ReasonHandoverComplete, "HandOverTLS", "TLS hand-over complete: every member runs the material spec.tls names and trusts its CA alone")
	}
	for _, f := range p.refused {
		about := []client.Object{}
		if f.about != nil {
			about = append(about, f.about)
		}
		r.warnOnce(w, conditions.ReasonRefused, "ProtectQuorum", f.message, about...)
	}
	if p.stuck != nil {
		r.warnOnce(w, conditions.ReasonRollOutStuck, "RollOut", p.stuck.message, p.stuck.about)
	}
	if p.versionRefused != "" {
		r.warnOnce(w, conditions.ReasonVersionChangeRefused, "CheckVersion", p.versionRefused)
	}
	if p.snapshotBeforeFailed != "" {
		r.warnOnce(w, conditions.ReasonSnapshotBeforeFailed, "SnapshotBefore", p.snapshotBeforeFailed)
	}
	if o.warn && o.progress != nil {
		r.warnOnce(w, o.progress.reason, "Retry", o.progress.message)
	}
	if overdue(w) && !hasReason(w, conditions.Progressing, conditions.ReasonDeadlineExceeded) &&
		!hasReason(w, conditions.Progressing, conditions.ReasonBootstrapFailed) && !targetReached(w) {
		reason, msg := deadlineReport(w)
		r.event(w.cluster, true, reason, "Deadline", "%s", msg)
	}
	if a := w.alarms(); len(a) > 0 {
		r.warnOnce(w, conditions.ReasonAlarm, "Alarm", alarmMessage(a))
	}
}

func set(w *world, typ string, status bool, reason, message string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	conditions.Set(&w.cluster.Status.Conditions, w.cluster.Generation, typ, s, reason, message, w.now)
}

func paused(w *world) bool { return w.desired() == 0 && len(w.running()) == 0 }

// authProblem is why etcd refuses the operator's credentials, as a step or
// the observation found it; for a cluster that never formed, as its seed
// reports it.
func authProblem(w *world) *finding {
	if w.features.auth != nil {
		return w.features.auth
	}
	if f := credentialsProblem(w.cluster, w.etcd.err); w.etcd.err != nil && f != nil {
		return f
	}
	if seed := w.seed(); seed != nil && w.cluster.Status.ClusterID == "" {
		if c := conditions.Get(seed.Status.Conditions, conditions.Ready); c != nil && c.Status != metav1.ConditionTrue &&
			(c.Reason == conditions.ReasonAuthRequiredNotConfigured || c.Reason == conditions.ReasonAuthCredentialsRejected) {
			return &finding{c.Reason, fmt.Sprintf("Seed member %s: %s", seed.Name, c.Message)}
		}
	}
	return nil
}

func setAvailable(w *world, p plan) {
	st := w.cluster.Status
	desired, readyN := w.desired(), w.healthyVoters()
	auth := authProblem(w)
	switch {
	case p.hold != nil:
		set(w, conditions.Available, false, p.hold.reason, p.hold.message)
	case auth != nil:
		set(w, conditions.Available, false, auth.reason, auth.message)
	case paused(w):
		set(w, conditions.Available, false, conditions.ReasonPaused, "The cluster is paused (replicas: 0); its data is kept")
	case overdue(w) && st.ClusterID == "":
		set(w, conditions.Available, false, conditions.ReasonBootstrapFailed, "The cluster never formed")
	case quorumLost(w):
		set(w, conditions.Available, false, conditions.ReasonQuorumLost, quorumLostMessage(w))
	case leaderlessNow(w):
		set(w, conditions.Available, false, conditions.ReasonNoLeader, noLeaderMessage(w))
	case w.etcd.asked && w.etcd.list == nil && readyN == 0:
		set(w, conditions.Available, false, conditions.ReasonClusterUnreachable, fmt.Sprintf("Cannot reach etcd: %v", w.etcd.err))
	case st.ClusterID == "" && secretWait(w) != "":
		set(w, conditions.Available, false, conditions.ReasonSecretMissing, "The seed member cannot start: "+secretWait(w))
	case st.ClusterID == "":
		set(w, conditions.Available, false, conditions.ReasonBootstrapping, "The seed member has not formed the cluster yet")
	case len(w.members) == 0:
		set(w, conditions.Available, false, conditions.ReasonQuorumLost,
			"Every member is gone: the cluster's data is gone. Delete the EtcdCluster and create it again (or restore a snapshot into a new one)")
	case readyN >= desired && readyN > 0:
		set(w, conditions.Available, true, conditions.ReasonQuorumHealthy, fmt.Sprintf("All %d members are healthy voters", readyN))
	default:
		// Judged against the voters etcd has now, not the target: a cluster
		// growing from 1 to 3 with its one voter healthy serves fine.
		switch d := quorum.Now(w.voters()); {
		case d.OK:
			set(w, conditions.Available, true, conditions.ReasonQuorumAvailable, d.Reason+", a quorum")
		case leaderUnreachable(w):
			// The members name a leader: a quorum the operator cannot see
			// enough of to prove.
			conditions.Set(&w.cluster.Status.Conditions, w.cluster.Generation, conditions.Available, metav1.ConditionUnknown,
				conditions.ReasonLeaderUnreachable, d.Reason+"; "+leaderUnreachableMessage(w), w.now)
		default:
			set(w, conditions.Available, false, conditions.ReasonQuorumLost, d.Reason)
		}
	}
}

func setProgressing(w *world, p plan) {
	switch {
	case p.hold != nil:
		set(w, conditions.Progressing, false, p.hold.reason, p.hold.message)
	case p.snapshotBeforeFailed != "":
		set(w, conditions.Progressing, false, conditions.ReasonSnapshotBeforeFailed, p.snapshotBeforeFailed)
	case p.progress.reason == conditions.ReasonTakingSnapshotBefore:
		set(w, conditions.Progressing, true, p.progress.reason, p.progress.message)
	case paused(w) && targetReached(w) && len(w.leaving()) == 0:
		set(w, conditions.Progressing, false, conditions.ReasonPaused, "The cluster is paused")
	case targetReached(w) && manifest.AuthWanted(w.cluster) && !w.cluster.Status.AuthEnabled:
		msg := "Enabling etcd authentication"
		if p.progress.reason == conditions.ReasonEnablingAuth {
			msg = p.progress.message
		}
		set(w, conditions.Progressing, true, conditions.ReasonEnablingAuth, msg)
	case targetReached(w):
		set(w, conditions.Progressing, false, conditions.ReasonReconciled,
			fmt.Sprintf("%d members of etcd %s are healthy voters", w.desired(), w.cluster.Status.Observed.Version))
	case p.versionRefused != "":
		set(w, conditions.Progressing, false, conditions.ReasonVersionChangeRefused, p.versionRefused)
	case overdue(w):
		// Reported, not given up: the operator keeps working on the target.
		reason, msg := deadlineReport(w)
		if p.progress.reason != "" {
			msg += "; now: " + p.progress.message
		}
		set(w, conditions.Progressing, false, reason, msg)
	case secretWait(w) != "":
		set(w, conditions.Progressing, true, conditions.ReasonSecretMissing, secretWait(w))
	case p.progress.reason != "":
		set(w, conditions.Progressing, true, p.progress.reason, p.progress.message)
	default:
		// Nothing new this pass; the earlier reason still describes the work.
		if c := conditions.Get(w.cluster.Status.Conditions, conditions.Progressing); c == nil || c.Status != metav1.ConditionTrue {
			set(w, conditions.Progressing, true, conditions.ReasonWaitingForMembers, "Waiting for members to become ready")
		}
	}
}

func setDegraded(w *world, p plan) {
	auth := authProblem(w)
	switch {
	case p.hold != nil && p.hold.reason == conditions.ReasonClusterIDMismatch:
		set(w, conditions.Degraded, true, p.hold.reason, p.hold.message)
	case len(w.features.foreignCertificates) > 0:
		set(w, conditions.Degraded, true, conditions.ReasonCertificateNotOwned, strings.Join(w.features.foreignCertificates, "; "))
	case p.hold != nil && w.cluster.Status.Observed == nil || p.hold != nil && w.cluster.Status.ClusterID == "":
		// Nothing was ever created, so nothing can be unhealthy (and the
		// cluster is not paused, as "no target, no member" would suggest).
		set(w, conditions.Degraded, false, p.hold.reason, "No member exists yet")
	case paused(w) && len(w.leaving()) == 0:
		set(w, conditions.Degraded, false, conditions.ReasonPaused, "The cluster is paused")
	case auth != nil:
		set(w, conditions.Degraded, true, auth.reason, auth.message)
	case p.stuck != nil:
		set(w, conditions.Degraded, true, conditions.ReasonRollOutStuck, p.stuck.message)
	case len(p.refused) > 0:
		set(w, conditions.Degraded, true, conditions.ReasonRefused, "Holding membership changes: "+p.refused[0].message)
	case w.cluster.Status.ClusterID != "" && leaderUnreachable(w):
		set(w, conditions.Degraded, true, conditions.ReasonLeaderUnreachable, leaderUnreachableMessage(w))
	case w.cluster.Status.ClusterID != "" && w.etcd.asked && !quorum.Now(w.voters()).OK:
		set(w, conditions.Degraded, true, conditions.ReasonQuorumLost, quorum.Now(w.voters()).Reason)
	default:
		setDegradedDetail(w)
	}
}

// setDegradedDetail reports, below everything that holds the operator back,
// alarms, unhealthy members and failed feature steps.
func setDegradedDetail(w *world) {
	var unhealthy []string
	for _, m := range append(w.running(), w.leaving()...) {
		// A member still joining is not unhealthy; a voter that is not
		// healthy, or any lost member, is.
		if m.Spec.Dormant {
			continue
		}
		if ok, why := w.health(m); (w.isVoter(m) && !ok) || lost(m) {
			unhealthy = append(unhealthy, m.Name+" ("+why+")")
		}
	}
	formed := w.cluster.Status.ClusterID != ""
	switch {
	case formed && len(w.alarms()) > 0:
		set(w, conditions.Degraded, true, conditions.ReasonAlarm, alarmMessage(w.alarms()))
	case formed && w.features.certManagerMissing != "":
		set(w, conditions.Degraded, true, conditions.ReasonCertManagerNotInstalled, w.features.certManagerMissing)
	case len(unhealthy) > 0 && formed:
		set(w, conditions.Degraded, true, conditions.ReasonMembersUnhealthy, fmt.Sprintf("Members not healthy: %s", strings.Join(unhealthy, ", ")))
	case len(w.features.failed) > 0:
		set(w, conditions.Degraded, true, conditions.ReasonStepFailed, "Failed (retried): "+strings.Join(w.features.failed, "; "))
	default:
		set(w, conditions.Degraded, false, conditions.ReasonQuorumHealthy, "No member is unhealthy")
	}
}

// alarmMessage says what etcd's alarms mean and what to do.
func alarmMessage(alarms []string) string {
	msg := "etcd raised alarm " + strings.Join(alarms, ", ")
	for _, a := range alarms {
		switch a {
		case etcd.AlarmNoSpace:
			msg += "; NOSPACE: the database reached its quota (options.quotaBackendBytes): writes are refused, reads are served and " +
				"membership changes go on. Free space (compact, then `kubectl etcd defrag`), then `kubectl etcd alarm disarm`"
		case etcd.AlarmCorrupt:
			msg += "; CORRUPT: a member's data disagrees with the others': find it with `kubectl etcd status` and replace it"
		}
	}
	return msg
}

// secretWait says which member cannot start its Pod for a missing Secret or
// key, and why, or "".
func secretWait(w *world) string {
	for _, m := range w.running() {
		if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil && c.Status != metav1.ConditionTrue && c.Reason == conditions.ReasonSecretMissing {
			return fmt.Sprintf("member %s: %s", m.Name, c.Message)
		}
	}
	return ""
}
