package defrag

import (
	"context"
	"errors"
	"fmt"
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
)

// Per-member reasons (DefragMemberStatus.Reason) besides ReasonBelowThreshold.
const (
	// ReasonRPCError: etcd refused or did not finish the Defragment call.
	ReasonRPCError = "RPCError"
	// ReasonMemberGone: the member no longer runs.
	ReasonMemberGone = "MemberGone"
	// ReasonAfterSizeUnavailable: defragmented, but its size afterwards
	// could not be read.
	ReasonAfterSizeUnavailable = "AfterSizeUnavailable"
	// reasonDefragmenting marks a Pending member the run decided to
	// defragment, its size before recorded: after a crash it is
	// defragmented without being judged again (its free space may be gone
	// already), and its size before is kept.
	reasonDefragmenting = "Defragmenting"
	// reasonNotReached: the run ended (its deadline passed) before it got
	// to the member.
	reasonNotReached = "DeadlineExceeded"
)

// advance takes an unfinished run one step on: one member defragmented,
// one leadership hand-over, or the run finished. The order of the checks is
// the order of their priority.
func (r *Reconciler) advance(ctx context.Context, p *pass) (ctrl.Result, error) {
	d := p.run
	if d.Status.Phase == "" {
		d.Status.Phase = v1alpha2.DefragPending
	}
	if ok, err := r.resolveCluster(ctx, p); !ok {
		return ctrl.Result{}, err
	}
	q, err := r.standing(ctx, d)
	if err != nil {
		return ctrl.Result{}, err
	}
	if q.ahead != "" {
		// The deadline is not checked while queued, and does not count
		// the time queued (overdue).
		d.Status.Phase = v1alpha2.DefragPending
		p.check(false, conditions.ReasonQueued, fmt.Sprintf("Waiting for EtcdDefrag %s to finish: one run per cluster at a time", q.ahead))
		// The watch on runs wakes this one; the timer is a backstop.
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	if p.overdue(q.turnSince) {
		r.deadlineExceeded(ctx, p)
		return ctrl.Result{}, nil
	}
	if why := busy(p.cluster); why != "" {
		return r.deferRun(p, conditions.ReasonClusterBusy, why), nil
	}
	if err := r.observe(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	if why := p.unhealthy(); why != "" {
		return r.deferRun(p, conditions.ReasonClusterNotHealthy, why), nil
	}
	if len(d.Status.Members) == 0 {
		p.plan()
	}
	return r.step(ctx, p)
}

// resolveCluster reads the run's cluster; a cluster that does not exist
// fails the run at once.
func (r *Reconciler) resolveCluster(ctx context.Context, p *pass) (bool, error) {
	c := &v1alpha2.EtcdCluster{}
	key := client.ObjectKey{Namespace: p.run.Namespace, Name: p.run.Spec.ClusterRef.Name}
	err := r.Client.Get(ctx, key, c)
	if apierrors.IsNotFound(err) {
		// The cache may not have a cluster created a moment ago: only the
		// API server's word fails the run.
		err = r.APIReader.Get(ctx, key, c)
	}
	switch {
	case apierrors.IsNotFound(err):
		msg := fmt.Sprintf("EtcdCluster %s does not exist in namespace %s; create a new EtcdDefrag naming an existing cluster", p.run.Spec.ClusterRef.Name, p.run.Namespace)
		r.finish(p, v1alpha2.DefragFailed, conditions.ReasonClusterNotFound, msg)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the EtcdCluster: %w", err)
	}
	p.cluster = c
	return true, nil
}

// deferRun holds the run back (it has not started: Pending; it has: it
// stays Running) with a Warning Event when the reason changes.
func (r *Reconciler) deferRun(p *pass, reason, why string) ctrl.Result {
	if p.run.Status.StartedAt == nil {
		p.run.Status.Phase = v1alpha2.DefragPending
	}
	// A run that waits blocks nothing: the lock goes back to the cluster.
	p.run.Status.Defragmenting = nil
	msg := "Waiting: " + why
	if p.check(false, reason, msg) {
		conditions.Record(r.Recorder, p.run, true, "DefragDeferred", "Defragment", "%s", msg)
	}
	// etcd's health is not watched; the cluster is, but its status may
	// say "at rest" before etcd does.
	return ctrl.Result{RequeueAfter: retry}
}

// overdue: the run took longer than Deadline since it started; if it never
// started, since it was created or, if later, since its turn came (the
// last older run of the cluster finished).
func (p *pass) overdue(turnSince time.Time) bool {
	from := p.run.CreationTimestamp.Time
	if turnSince.After(from) {
		from = turnSince
	}
	if p.run.Status.StartedAt != nil {
		from = p.run.Status.StartedAt.Time
	}
	return !from.IsZero() && p.now.Sub(from) > Deadline
}

// plan lists the members in the order they go: followers by name, the
// leader last, so that leadership moves at most once.
func (p *pass) plan() {
	var leader *v1alpha2.DefragMemberStatus
	for _, m := range p.members {
		row := v1alpha2.DefragMemberStatus{Name: m.Name, Role: v1alpha2.DefragRoleFollower, Outcome: v1alpha2.DefragOutcomePending}
		if st := p.status[m.Name]; st.Leader == st.MemberID {
			row.Role = v1alpha2.DefragRoleLeader
			leader = &row
			continue
		}
		p.run.Status.Members = append(p.run.Status.Members, row)
	}
	if leader != nil {
		p.run.Status.Members = append(p.run.Status.Members, *leader)
	}
}

// step works on the next member of the plan: records a skip (and goes on
// to the next), hands leadership over, or defragments it.
func (r *Reconciler) step(ctx context.Context, p *pass) (ctrl.Result, error) {
	d := p.run
	for i := range d.Status.Members {
		row := &d.Status.Members[i]
		if row.Outcome != v1alpha2.DefragOutcomePending {
			continue
		}
		p.markRunning(i)
		m, st := p.member(row.Name), p.status[row.Name]
		if m == nil || st == nil {
			p.done(row, v1alpha2.DefragOutcomeFailed, ReasonMemberGone)
			continue
		}
		if row.Reason != reasonDefragmenting {
			v := judge(d.Spec.Rule, sizes{st.DBSize, st.DBSizeInUse}, quotaOf(p.cluster))
			if !v.defrag {
				row.DBSizeBefore = st.DBSize
				p.done(row, v1alpha2.DefragOutcomeSkipped, ReasonBelowThreshold)
				logger(ctx, d)("Skipped a member the rule does not select", "member", m.Name, "why", v.why)
				continue
			}
		}
		if st.Leader == st.MemberID && len(p.members) > 1 {
			return r.handOver(ctx, p, m)
		}
		return r.defragment(ctx, p, i, m, st)
	}
	r.complete(ctx, p)
	return ctrl.Result{}, nil
}

// markRunning starts the run (once) and says which member it is at.
func (p *pass) markRunning(i int) {
	d := p.run
	d.Status.Phase = v1alpha2.DefragRunning
	if d.Status.StartedAt == nil {
		d.Status.StartedAt = &metav1.Time{Time: p.now}
	}
	p.check(true, conditions.ReasonDefragRunning, fmt.Sprintf("Defragmenting members: %s (%d of %d)", d.Status.Members[i].Name, i+1, len(d.Status.Members)))
}

// done records a member's outcome.
func (p *pass) done(row *v1alpha2.DefragMemberStatus, outcome v1alpha2.DefragOutcome, reason string) {
	row.Outcome, row.Reason, row.FinishedAt = outcome, reason, &metav1.Time{Time: p.now}
	if req := p.run.Status.Defragmenting; req != nil && req.Member == row.Name {
		p.run.Status.Defragmenting = nil
	}
	p.run.Status.Defragmented = 0
	for _, m := range p.run.Status.Members {
		if m.Outcome == v1alpha2.DefragOutcomeDefragmented {
			p.run.Status.Defragmented++
		}
	}
}

// handOver moves leadership from m, the next member to defragment, to a
// follower, preferably one already done: a leader blocked by its own
// defragmentation stalls every write. etcd takes the request only from the
// leader, so it goes through a client of m alone.
func (r *Reconciler) handOver(ctx context.Context, p *pass, m *v1alpha2.EtcdMember) (ctrl.Result, error) {
	to := p.transferee(m)
	if to == nil {
		return r.deferRun(p, conditions.ReasonClusterNotHealthy, "no follower to hand leadership over to before defragmenting "+m.Name), nil
	}
	c, err := r.dial(ctx, p.cluster, []*v1alpha2.EtcdMember{m})
	if err == nil {
		defer func() { _ = c.Close() }()
		err = c.MoveLeader(ctx, p.status[to.Name].MemberID)
	}
	if err != nil {
		return r.deferRun(p, conditions.ReasonClusterNotHealthy, fmt.Sprintf("moving leadership from %s to %s before defragmenting it failed: %v", m.Name, to.Name, err)), nil
	}
	conditions.Record(r.Recorder, p.run, false, "LeadershipMoved", "Defragment", "Moved leadership from %s to %s before defragmenting %s", m.Name, to.Name, m.Name)
	logger(ctx, p.run)("Moved leadership before defragmenting the leader; the next pass defragments it", "from", m.Name, "to", to.Name)
	// etcd reports the new leader at once; the next pass checks health
	// afresh and defragments m as a follower.
	return ctrl.Result{RequeueAfter: settle}, nil
}

// transferee picks a follower to lead: done ones first (they will not be
// blocked again), then by name.
func (p *pass) transferee(from *v1alpha2.EtcdMember) *v1alpha2.EtcdMember {
	var pick *v1alpha2.EtcdMember
	pickDone := false
	for _, m := range p.members {
		if m == from || p.status[m.Name] == nil {
			continue
		}
		isDone := false
		for _, row := range p.run.Status.Members {
			isDone = isDone || (row.Name == m.Name && row.Outcome != v1alpha2.DefragOutcomePending)
		}
		if pick == nil || isDone && !pickDone {
			pick, pickDone = m, isDone
		}
	}
	return pick
}

// defragment records the decision and the size before, and, once the
// cluster granted the maintenance lock for the member (lock.go), defragments
// it and records the outcome. A crash after the first write defragments it
// again on a later pass, which is harmless.
func (r *Reconciler) defragment(ctx context.Context, p *pass, i int, m *v1alpha2.EtcdMember, st *etcd.Status) (ctrl.Result, error) {
	if row := &p.run.Status.Members[i]; row.Reason != reasonDefragmenting {
		row.Reason, row.DBSizeBefore = reasonDefragmenting, st.DBSize
	}
	if held, res, err := r.takeLock(ctx, p, m); !held {
		return res, err
	}
	// The write decoded the answer into the run: take the row afresh.
	row := &p.run.Status.Members[i]
	dctx, cancel := context.WithTimeout(ctx, defragTimeout)
	err := p.client.Defragment(dctx, manifest.ClientURL(m))
	cancel()
	if err != nil {
		p.done(row, v1alpha2.DefragOutcomeFailed, ReasonRPCError)
		conditions.Record(r.Recorder, p.run, true, "DefragFailed", "Defragment", "Defragmenting member %s failed: %v; the run goes on with the others and ends Failed", m.Name, err)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	reason := ""
	after, err := memberStatus(ctx, p.client, m)
	if err != nil {
		reason = ReasonAfterSizeUnavailable
	} else {
		row.DBSizeAfter = after.DBSize
		if reclaimed := row.DBSizeBefore - after.DBSize; reclaimed >= 0 {
			row.ReclaimedBytes = reclaimed
		}
	}
	p.done(row, v1alpha2.DefragOutcomeDefragmented, reason)
	conditions.Record(r.Recorder, p.run, false, "MemberDefragmented", "Defragment", "Defragmented member %s (%s): %d bytes reclaimed", m.Name, row.Role, row.ReclaimedBytes)
	logger(ctx, p.run)("Defragmented a member; the next waits for the cluster to be healthy", "member", m.Name, "reclaimed", row.ReclaimedBytes)
	// The member was blocked: give it time to catch up, then check the
	// cluster's health afresh before the next.
	return ctrl.Result{RequeueAfter: retry}, nil
}

// complete finishes a run whose members are all done: NOSPACE alarms are
// disarmed if any member was defragmented, then the phase is final.
func (r *Reconciler) complete(ctx context.Context, p *pass) {
	d := p.run
	if d.Status.Defragmented > 0 {
		r.disarmNoSpace(ctx, p, p.client)
	}
	failed := 0
	for _, m := range d.Status.Members {
		if m.Outcome == v1alpha2.DefragOutcomeFailed {
			failed++
		}
	}
	msg := fmt.Sprintf("%d/%d members defragmented", d.Status.Defragmented, len(d.Status.Members))
	if failed > 0 {
		r.finish(p, v1alpha2.DefragFailed, conditions.ReasonMemberFailed, fmt.Sprintf("%s, %d failed; create a new EtcdDefrag to retry", msg, failed))
		return
	}
	r.finish(p, v1alpha2.DefragComplete, conditions.ReasonDefragComplete, msg)
}

// finish makes the phase final.
func (r *Reconciler) finish(p *pass, phase v1alpha2.DefragPhase, reason, msg string) {
	p.run.Status.Phase = phase
	p.run.Status.CompletedAt = &metav1.Time{Time: p.now}
	p.run.Status.Defragmenting = nil
	changed := p.check(phase == v1alpha2.DefragComplete, reason, msg)
	if phase == v1alpha2.DefragFailed && changed {
		conditions.Record(r.Recorder, p.run, true, reason, "Defragment", "%s", msg)
	}
}

// deadlineExceeded fails a run past its deadline, after disarming NOSPACE
// if it defragmented a member.
func (r *Reconciler) deadlineExceeded(ctx context.Context, p *pass) {
	d := p.run
	if d.Status.Defragmented > 0 {
		if err := r.observe(ctx, p); err == nil && p.client != nil {
			r.disarmNoSpace(ctx, p, p.client)
		}
	}
	for i := range d.Status.Members {
		if row := &d.Status.Members[i]; row.Outcome == v1alpha2.DefragOutcomePending {
			p.done(row, v1alpha2.DefragOutcomeSkipped, reasonNotReached)
		}
	}
	msg := fmt.Sprintf("The run did not complete within %s", Deadline)
	if d.Status.StartedAt == nil {
		why := ""
		if c := conditions.Get(d.Status.Conditions, conditions.DefragChecked); c != nil {
			why = ": " + strings.TrimPrefix(c.Message, "Waiting: ")
		}
		msg = fmt.Sprintf("The run could not start within %s (the cluster never became ready for it%s)", Deadline, why)
	}
	r.finish(p, v1alpha2.DefragFailed, conditions.ReasonDeadlineExceeded, msg+"; create a new EtcdDefrag to retry")
}

// disarmNoSpace clears every NOSPACE alarm once space was reclaimed, best
// effort: a failure is an Event, never the run's failure. Other alarms
// (CORRUPT) are for a person to look at.
func (r *Reconciler) disarmNoSpace(ctx context.Context, p *pass, c etcd.Client) {
	lctx, cancel := context.WithTimeout(ctx, statusTimeout)
	alarms, err := c.AlarmList(lctx)
	cancel()
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("listing alarms: %w", err))
	}
	for _, a := range alarms {
		if a.Type != etcd.AlarmNoSpace {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, statusTimeout)
		_, err := c.AlarmDisarm(dctx, a)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("disarming NOSPACE of member %s: %w", etcd.FormatID(a.MemberID), err))
			continue
		}
		logger(ctx, p.run)("Disarmed a NOSPACE alarm after reclaiming space", "memberID", etcd.FormatID(a.MemberID))
		conditions.Record(r.Recorder, p.run, false, "AlarmDisarmed", "Defragment", "Disarmed the NOSPACE alarm of member %s", etcd.FormatID(a.MemberID))
	}
	if err := errors.Join(errs...); err != nil {
		conditions.Record(r.Recorder, p.run, true, "AlarmDisarmFailed", "Defragment", "Space was reclaimed but NOSPACE could not be disarmed: %v; disarm it with kubectl etcd alarm disarm", err)
	}
}
