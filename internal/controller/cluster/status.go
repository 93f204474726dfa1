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
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// writeStatus derives the status from the world and writes it only when it
// changed, so a steady cluster costs no writes.
func (r *Reconciler) writeStatus(ctx context.Context, w *world) error {
	st := &w.cluster.Status
	// Ready voters: a learner does not serve clients.
	st.ReadyMembers = int32(w.readyVoters())
	st.UpdatedMembers = int32(w.updated())
	st.Selector = manifest.SelectorString(w.cluster.Name)
	st.BrokenMembers = int32(len(w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && lost(m) })))
	setAvailable(w)
	setProgressing(w)
	setDegraded(w)
	if equality.Semantic.DeepEqual(w.original.Status, w.cluster.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, w.cluster, client.MergeFrom(w.original)); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	return nil
}

func set(w *world, typ string, status bool, reason, message string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	conditions.Set(&w.cluster.Status.Conditions, w.cluster.Generation, typ, s, reason, message, w.now)
}

func paused(w *world) bool { return w.desired() == 0 && len(w.running()) == 0 }

func setAvailable(w *world) {
	st := w.cluster.Status
	desired, readyN := w.desired(), w.readyVoters()
	switch {
	case w.blocked != nil:
		set(w, conditions.Available, false, w.blocked.reason, w.blocked.message)
	case w.authProblem != nil:
		set(w, conditions.Available, false, w.authProblem.reason, w.authProblem.message)
	case w.mismatch != "":
		set(w, conditions.Available, false, conditions.ReasonClusterIDMismatch, w.mismatch)
	case paused(w):
		set(w, conditions.Available, false, conditions.ReasonPaused, "The cluster is paused (replicas: 0); its data is kept")
	case overdue(w) && st.ClusterID == "":
		set(w, conditions.Available, false, conditions.ReasonBootstrapFailed, "The cluster never formed")
	case w.unreachable != nil && readyN == 0:
		set(w, conditions.Available, false, conditions.ReasonClusterUnreachable, "Cannot reach etcd: "+w.unreachable.Error())
	case st.ClusterID == "" && secretWait(w) != "":
		set(w, conditions.Available, false, conditions.ReasonSecretMissing, "The seed member cannot start: "+secretWait(w))
	case st.ClusterID == "":
		set(w, conditions.Available, false, conditions.ReasonBootstrapping, "The seed member has not formed the cluster yet")
	case len(w.members) == 0:
		set(w, conditions.Available, false, conditions.ReasonQuorumLost,
			"Every member was deleted: the cluster's data is gone. Delete the EtcdCluster and create it again (or restore a snapshot into a new one)")
	case readyN >= desired && readyN > 0:
		set(w, conditions.Available, true, conditions.ReasonQuorumHealthy, fmt.Sprintf("All %d members are ready voters", readyN))
	default:
		// Judged against the voters etcd has now, not the target: a cluster
		// growing from 1 to 3 with its one voter healthy serves fine.
		if d := quorum.Now(w.voters()); d.OK {
			set(w, conditions.Available, true, conditions.ReasonQuorumAvailable, d.Reason+", a quorum")
		} else {
			set(w, conditions.Available, false, conditions.ReasonQuorumLost, d.Reason)
		}
	}
}

func setProgressing(w *world) {
	switch {
	case w.blocked != nil:
		set(w, conditions.Progressing, false, w.blocked.reason, w.blocked.message)
	case paused(w) && targetReached(w):
		set(w, conditions.Progressing, false, conditions.ReasonPaused, "The cluster is paused")
	case targetReached(w) && manifest.AuthWanted(w.cluster) && !w.cluster.Status.AuthEnabled:
		msg := "Enabling etcd authentication"
		if w.progress.reason == conditions.ReasonEnablingAuth {
			msg = w.progress.message
		}
		set(w, conditions.Progressing, true, conditions.ReasonEnablingAuth, msg)
	case targetReached(w):
		set(w, conditions.Progressing, false, conditions.ReasonReconciled,
			fmt.Sprintf("%d members of etcd %s are ready voters", w.desired(), w.cluster.Status.Observed.Version))
	case w.blockedVersion != "":
		set(w, conditions.Progressing, false, conditions.ReasonVersionChangeRefused, w.blockedVersion)
	case overdue(w):
		// Reported, not given up: the operator keeps working on the target.
		reason, msg := deadlineReport(w)
		if w.progress.reason != "" {
			msg += "; now: " + w.progress.message
		}
		set(w, conditions.Progressing, false, reason, msg)
	case secretWait(w) != "":
		set(w, conditions.Progressing, true, conditions.ReasonSecretMissing, secretWait(w))
	case w.progress.reason != "":
		set(w, conditions.Progressing, true, w.progress.reason, w.progress.message)
	default:
		// Nothing new this pass; the earlier reason still describes the work.
		if c := conditions.Get(w.cluster.Status.Conditions, conditions.Progressing); c == nil || c.Status != metav1.ConditionTrue {
			set(w, conditions.Progressing, true, conditions.ReasonWaitingForMembers, "Waiting for members to become ready")
		}
	}
}

func setDegraded(w *world) {
	var unhealthy []string
	for _, m := range w.running() {
		// A member still joining is not unhealthy; a voter that is not
		// ready, or any lost member, is.
		if (w.isVoter(m) && !ready(m)) || lost(m) {
			unhealthy = append(unhealthy, m.Name)
		}
	}
	switch {
	case w.mismatch != "":
		set(w, conditions.Degraded, true, conditions.ReasonClusterIDMismatch, w.mismatch)
	case len(w.foreignCertificates) > 0:
		set(w, conditions.Degraded, true, conditions.ReasonCertificateNotOwned, strings.Join(w.foreignCertificates, "; "))
	case w.blocked != nil && w.cluster.Status.Observed == nil:
		// Nothing was ever created, so nothing can be unhealthy (and the
		// cluster is not paused, as "no target, no member" would suggest).
		set(w, conditions.Degraded, false, w.blocked.reason, "No member exists yet")
	case paused(w):
		set(w, conditions.Degraded, false, conditions.ReasonPaused, "The cluster is paused")
	case w.authProblem != nil:
		set(w, conditions.Degraded, true, w.authProblem.reason, w.authProblem.message)
	case w.stuck != "":
		set(w, conditions.Degraded, true, conditions.ReasonRollOutStuck, w.stuck)
	case w.refused != "":
		set(w, conditions.Degraded, true, conditions.ReasonRefused, "Holding membership changes: "+w.refused)
	case w.cluster.Status.ClusterID != "" && !quorum.Now(w.voters()).OK:
		set(w, conditions.Degraded, true, conditions.ReasonQuorumLost, quorum.Now(w.voters()).Reason)
	case len(unhealthy) > 0 && w.cluster.Status.ClusterID != "":
		set(w, conditions.Degraded, true, conditions.ReasonMembersUnhealthy, fmt.Sprintf("Members not ready: %v", unhealthy))
	default:
		set(w, conditions.Degraded, false, conditions.ReasonQuorumHealthy, "No member is unhealthy")
	}
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
