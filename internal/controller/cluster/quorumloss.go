package cluster

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// When the operator calls a quorum lost. Only then may a recovery be
// planned or carried out, so the judgment leans the safe way: a cluster
// called healthy while it has no quorum only waits for a person; a cluster
// called quorum-less while it has one can lose acknowledged writes.
//
// The members say it, not the operator's reach:
//
//   - a member whose etcd answers and names a leader (itself or another)
//     is evidence of a quorum: raft clears a follower's leader once an
//     election timeout passes without hearing from it, and a leader that
//     cannot reach a quorum steps down (etcd runs raft with CheckQuorum);
//   - a voter whose etcd does not answer the operator but whose Pod is
//     Ready is unknown, not gone: its readiness probe is etcd's
//     linearizable /health, which passes only with a leader;
//   - and the state must last lossGrace, many election timeouts,
//     in an unbroken run of passes (status.noLeaderSince), so that an
//     election in progress is never called a loss.
//
// A leader that followers name but the operator cannot reach is its own
// state (Degraded, LeaderUnreachable); the followers are judged against the
// leader they name (etcdhealth.Reference), the leader itself is unknown.

// quorumLossGrace is how long no member may name a leader before the
// quorum is called lost: many of etcd's default 1 s election timeouts, and
// more than the 5 s etcd waits before it accepts a membership change again.
// A cluster with a longer election timeout (options.electionTimeout) gets
// electionsInGrace of its own timeouts if that is longer (lossGrace).
const quorumLossGrace = 20 * time.Second

// electionsInGrace is how many election timeouts the grace covers at least.
const electionsInGrace = 10

// lossGrace is the cluster's grace before a leaderless run is called a
// quorum loss: quorumLossGrace, or electionsInGrace of its latched
// election timeouts when that is longer.
func lossGrace(w *world) time.Duration {
	o := w.cluster.Status.Observed
	if o == nil || o.Options == nil || o.Options.ElectionTimeout == nil {
		return quorumLossGrace
	}
	return max(quorumLossGrace, electionsInGrace*time.Duration(*o.Options.ElectionTimeout)*time.Millisecond)
}

// leaderlessNow reports whether, by this pass's fresh reports, the formed
// cluster shows no sign of a quorum: no member that answers names a leader,
// no voter it cannot reach has a Ready Pod, and the voters healthy now are
// not a majority.
func leaderlessNow(w *world) bool {
	if w.cluster.Status.ClusterID == "" || paused(w) || len(w.members) == 0 {
		return false
	}
	if ref, _ := w.reference(); ref != nil {
		return false
	}
	for _, m := range w.running() {
		if w.etcd.status[m.Name] == nil && w.isVoter(m) && w.pods[m.Name] != nil && podReady(w.pods[m.Name]) && !lost(m) {
			return false
		}
	}
	return !quorum.Now(w.voters()).OK
}

// noLeaderSince is what status.noLeaderSince holds after this pass: when
// the unbroken run of leaderless passes began, nil when this pass is not
// one.
func noLeaderSince(w *world) *metav1.Time {
	if !leaderlessNow(w) {
		return nil
	}
	if since := w.cluster.Status.NoLeaderSince; since != nil && !since.After(w.now) {
		return since
	}
	return &metav1.Time{Time: w.now.Truncate(time.Second)}
}

// quorumLost reports whether the formed cluster has lost its quorum: it is
// leaderless now and has been for lossGrace.
func quorumLost(w *world) bool {
	since := noLeaderSince(w)
	return since != nil && w.now.Sub(since.Time) >= lossGrace(w)
}

// quorumLossTimer is how long until a leaderless cluster is called
// quorum-less, for the pass to come back then; nil when it is not
// leaderless or already called so.
func quorumLossTimer(w *world) *time.Duration {
	since := noLeaderSince(w)
	if since == nil || quorumLost(w) {
		return nil
	}
	d := since.Add(lossGrace(w)).Sub(w.now)
	return &d
}

// noLeaderMessage says that no member names a leader yet, and when the
// quorum will be called lost if that lasts.
func noLeaderMessage(w *world) string {
	since := noLeaderSince(w)
	return fmt.Sprintf("No member that answers names a leader since %s (an election, or a quorum lost): "+
		"the quorum is called lost if this lasts until %s", since.UTC().Format(time.RFC3339),
		since.Add(lossGrace(w)).UTC().Format(time.RFC3339))
}

// leaderUnreachableMessage names the leader the members follow and why the
// operator cannot read it.
func leaderUnreachableMessage(w *world) string {
	ref, _ := w.reference()
	name := "member " + etcd.FormatID(ref.MemberID)
	if m := w.byID(ref.MemberID); m != nil {
		name = m.Name
		if err := w.etcd.statusErr[m.Name]; err != nil {
			name += " (" + err.Error() + ")"
		}
	}
	var followers []string
	for _, m := range w.running() {
		if st := w.etcd.status[m.Name]; st != nil && st.Leader == ref.MemberID && st.RaftTerm == ref.RaftTerm {
			followers = append(followers, m.Name)
		}
	}
	return fmt.Sprintf("The leader %s does not answer the operator, while %s follow it in term %d: the cluster has a quorum; "+
		"membership changes and restarts wait until the operator can read the leader again (check the network between the operator and that member's client port)",
		name, strings.Join(followers, ", "), ref.RaftTerm)
}

// quorumLostMessage names the members that answer without a leader and the
// ones that are gone, each with the time it stopped being ready, and what
// to do.
func quorumLostMessage(w *world) string {
	var answer, gone []string
	for _, m := range w.running() {
		if !m.Status.IsVoter && !w.isVoter(m) {
			continue
		}
		if st := w.etcd.status[m.Name]; st != nil {
			answer = append(answer, fmt.Sprintf("%s (applied index %d)", m.Name, st.RaftAppliedIndex))
			continue
		}
		why := "does not answer"
		if ok, reason := w.health(m); !ok {
			why = reason
		}
		if c := conditions.Get(m.Status.Conditions, conditions.Ready); c != nil && c.Status != metav1.ConditionTrue {
			why += ", not ready since " + c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		gone = append(gone, fmt.Sprintf("%s (%s)", m.Name, why))
	}
	msg := "Quorum lost: no member has named a leader since " + noLeaderSince(w).UTC().Format(time.RFC3339)
	if len(answer) > 0 {
		msg += "; answering without a leader: " + strings.Join(answer, ", ")
	}
	if len(gone) > 0 {
		msg += "; gone: " + strings.Join(gone, ", ")
	}
	return msg + ". If the members that are gone will not come back, annotate the EtcdCluster with " +
		manifest.AnnotationRecover + "=" + manifest.RecoverDryRun + " (or run `kubectl etcd recover --dry-run`) to see the recovery plan"
}

// leaderUnreachable reports whether members follow a leader the operator
// could not read in this pass.
func leaderUnreachable(w *world) bool {
	ref, inferred := w.reference()
	return ref != nil && inferred && !paused(w)
}
