package cluster

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// A member joins in steps, each recoverable after a crash: its EtcdMember
// is created (initialCluster empty); the membership it will join with is
// recorded on it (etcd's membership and itself), so that the member
// controller starts its Pod at once, held by the join gate; once the Pod's
// address is in the headless Service's endpoints (so cluster DNS knows the
// member's name before etcd's leader first asks for it), etcd adds it as a
// learner, the gate lets etcd start, and the membership is recorded as its
// initialCluster. Once its applied index has caught up with the leader's,
// it is promoted. Without the operator's image (no gate) the Pod starts
// only after the add.

// recordJoined finishes the third step for members etcd already lists: the
// operator stopped between adding one and recording it. No etcd change.
func (r *Reconciler) recordJoined(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.etcdMembers == nil {
		return nil, nil
	}
	for _, m := range w.pending() {
		if !m.Spec.Bootstrap && w.etcdMemberOf(m) != nil {
			if err := r.setInitialCluster(ctx, m, initialClusterFor(w, m)); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// addPending adds a created member to etcd as a learner and records the
// membership as its initialCluster. etcd holds one learner at a time.
func (r *Reconciler) addPending(ctx context.Context, w *world) (*ctrl.Result, error) {
	for _, m := range w.pending() {
		if m.Spec.Bootstrap || w.etcdMemberOf(m) != nil {
			continue
		}
		if l := w.learner(); l != nil {
			w.working(conditions.ReasonScalingUp, fmt.Sprintf("Waiting for learner %s before adding %s", strangerName(*l), m.Name))
			return nil, nil
		}
		if res, err, wait := r.readyToAdd(ctx, w, m); wait {
			return res, err
		}
		if d := quorum.AddLearner(w.voters()); !d.OK {
			r.refuse(w, d.Reason)
			return nil, nil
		}
		w.working(conditions.ReasonScalingUp, fmt.Sprintf("Adding member %s", m.Name))
		var added *etcd.Member
		err := r.withClient(ctx, w, nil, func(ctx context.Context, c etcd.Client) error {
			var err error
			added, err = c.MemberAddAsLearner(ctx, []string{manifest.PeerURL(m)})
			return err
		})
		r.Metrics.MembershipOp(w.cluster, "add-learner", err)
		if err != nil {
			return r.retryable(ctx, w, "adding "+m.Name+" as a learner", err)
		}
		w.etcdMembers.Members = append(w.etcdMembers.Members, *added)
		r.event(w.cluster, false, "MemberAdded", "AddLearner", "Added %s to etcd as learner %s", m.Name, etcd.FormatID(added.ID))
		if err := r.setInitialCluster(ctx, m, initialClusterFor(w, m)); err != nil {
			return nil, err
		}
		return done(), nil
	}
	return nil, nil
}

// prepareJoin records on a new member the membership it will join with, so
// that its Pod starts (held by the join gate) while etcd is asked to add it.
func (r *Reconciler) prepareJoin(ctx context.Context, w *world, m *v1alpha2.EtcdMember) error {
	if r.OperatorImage == "" || m.Annotations[manifest.AnnotationJoinCluster] != "" {
		return nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationJoinCluster, joinClusterFor(w, m))
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("recording the join cluster of %s: %w", m.Name, err)
	}
	return nil
}

// readyToAdd holds the add of a member whose Pod starts first until its
// address is in the headless Service's endpoints. A member prepared for a
// membership that has changed since is replaced: its etcd would not find
// the membership it was told. It halts the pass when it waits or acted.
func (r *Reconciler) readyToAdd(ctx context.Context, w *world, m *v1alpha2.EtcdMember) (*ctrl.Result, error, bool) {
	prepared := m.Annotations[manifest.AnnotationJoinCluster]
	if prepared == "" || r.OperatorImage == "" {
		return nil, nil, false
	}
	if prepared != joinClusterFor(w, m) {
		res, err := r.deleteMember(ctx, w, m, conditions.ReasonReplacingMember,
			fmt.Sprintf("Replacing member %s: etcd's membership changed since it was prepared to join", m.Name))
		return res, err, true
	}
	if !r.reachable(ctx, w, m) {
		w.working(conditions.ReasonScalingUp, fmt.Sprintf("Waiting for the Pod of %s to be in the cluster's endpoints before adding it", m.Name))
		// The EndpointSlice's change brings us back.
		return nil, nil, true
	}
	return nil, nil, false
}

// reachable reports whether the member's Pod address is in an EndpointSlice
// of the headless Service its DNS name comes from.
func (r *Reconciler) reachable(ctx context.Context, w *world, m *v1alpha2.EtcdMember) bool {
	pod := w.pods[m.Name]
	if pod == nil || pod.Status.PodIP == "" {
		return false
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, slices, client.InNamespace(m.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: manifest.ServiceName(m)}); err != nil {
		return false
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if slicesContains(e.Addresses, pod.Status.PodIP) {
				return true
			}
		}
	}
	return false
}

func slicesContains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// joinClusterFor is the --initial-cluster a member not yet in etcd will join
// with: etcd's membership now, and itself.
func joinClusterFor(w *world, joining *v1alpha2.EtcdMember) string {
	peers := map[string]string{joining.Name: manifest.PeerURL(joining)}
	for _, em := range w.etcdMembers.Members {
		if len(em.PeerURLs) == 0 {
			continue
		}
		name := em.Name
		if m := w.memberOf(em); m != nil {
			name = m.Name
		}
		if name != "" {
			peers[name] = em.PeerURLs[0]
		}
	}
	return manifest.InitialCluster(peers)
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

// initialClusterFor renders --initial-cluster from etcd's own membership. A
// member that has not started yet has no name in etcd; the one joining now is
// named after its EtcdMember.
func initialClusterFor(w *world, joining *v1alpha2.EtcdMember) string {
	peers := map[string]string{}
	for _, em := range w.etcdMembers.Members {
		if len(em.PeerURLs) == 0 {
			continue
		}
		name := em.Name
		if m := w.memberOf(em); m != nil && (m == joining || name == "") {
			name = m.Name
		}
		if name != "" {
			peers[name] = em.PeerURLs[0]
		}
	}
	return manifest.InitialCluster(peers)
}

// promoteLearner promotes etcd's learner once its applied index has caught
// up with the leader's, read through the Maintenance Status RPC. A learner
// that is leaving, lost or not started yet holds nothing else up.
func (r *Reconciler) promoteLearner(ctx context.Context, w *world) (*ctrl.Result, error) {
	em := w.learner()
	if em == nil {
		return nil, nil
	}
	m := w.memberOf(*em)
	if m == nil || deleting(m) || m.Spec.Dormant || lost(m) {
		return nil, nil
	}
	w.working(conditions.ReasonPromotingLearner, fmt.Sprintf("Waiting for learner %s to catch up", m.Name))
	if m.Status.MemberID == "" || !ready(m) {
		// The learner does not serve yet; its member controller reports the
		// moment it does, and that status change wakes us.
		return nil, nil
	}
	began := time.Now()
	caughtUp, err := r.caughtUp(ctx, w, m)
	log.FromContext(ctx).V(1).Info("Asked whether the learner caught up", "member", m.Name, "caughtUp", caughtUp, "error", err, "took", time.Since(began).String())
	if err != nil || !caughtUp {
		// Catching up is not watched: ask again shortly.
		return stop(etcdRetry), nil
	}
	if d := quorum.Promote(w.voters(), m.Name, true); !d.OK {
		r.refuse(w, d.Reason)
		return nil, nil
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, c etcd.Client) error { return c.MemberPromote(ctx, em.ID) })
	r.Metrics.MembershipOp(w.cluster, "promote", err)
	if err != nil {
		return r.retryable(ctx, w, "promoting "+m.Name, err)
	}
	em.IsLearner = false
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
	ls, err := r.status(ctx, w, learner)
	if err != nil {
		return false, err
	}
	leader := w.byID(ls.Leader)
	if leader == nil {
		return false, fmt.Errorf("learner %s sees no leader it can name", learner.Name)
	}
	lead, err := r.status(ctx, w, leader)
	if err != nil {
		return false, err
	}
	return ls.RaftAppliedIndex*10 >= lead.RaftAppliedIndex*9, nil
}
