package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// retryRemoval waits for what a refused or failed removal depends on: the
// health of the other members (not watched from here) or etcd's own
// reconfiguration timer.
const retryRemoval = 2 * time.Second

// finalize removes a deleted member from etcd, then lets it go. A member whose
// cluster is gone or going needs no removal. The removal is refused while it
// would leave the remaining voters without a quorum, whoever asked for it.
func (r *Reconciler) finalize(ctx context.Context, s *state) (ctrl.Result, error) {
	m := s.member
	if !controllerutil.ContainsFinalizer(m, build.MemberFinalizer) {
		return ctrl.Result{}, nil
	}
	if s.cluster != nil && s.cluster.DeletionTimestamp == nil {
		done, err := r.removeFromEtcd(ctx, s)
		if werr := r.writeStatus(ctx, s); werr != nil && err == nil {
			err = werr
		}
		if err != nil || !done {
			return ctrl.Result{RequeueAfter: retryRemoval}, err
		}
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, build.MemberFinalizer)
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// siblings are the other members of the cluster that have a running Pod.
func (r *Reconciler) siblings(ctx context.Context, m *v1alpha2.EtcdMember) ([]*v1alpha2.EtcdMember, error) {
	list := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingLabels{build.LabelCluster: m.Spec.ClusterName}); err != nil {
		return nil, err
	}
	var out []*v1alpha2.EtcdMember
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID != m.UID && o.Status.PodName != "" && !o.Spec.Dormant && o.Spec.InitialCluster != "" {
			out = append(out, o)
		}
	}
	return out, nil
}

// removeFromEtcd reports whether etcd no longer lists the member.
func (r *Reconciler) removeFromEtcd(ctx context.Context, s *state) (bool, error) {
	m := s.member
	others, err := r.siblings(ctx, m)
	if err != nil {
		return false, err
	}
	if len(others) == 0 {
		// Nobody left to ask: the last member of a cluster takes its
		// membership with it.
		return true, nil
	}
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, s.cluster, others)
	if err != nil {
		return false, err
	}
	c, err := r.Dial(ctx, cfg)
	if err != nil {
		r.setRemovalProblem(s, "cannot reach the other members to remove this one: "+err.Error())
		return false, nil
	}
	defer func() { _ = c.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.MemberList(rctx)
	if err != nil {
		r.setRemovalProblem(s, "cannot list etcd members: "+err.Error())
		return false, nil
	}
	id, found := findMember(list, m)
	if !found {
		return true, nil
	}
	if d := quorum.Remove(votersOf(list, m, others), m.Name); !d.OK {
		r.setRemovalProblem(s, d.Reason)
		r.event(m, true, conditions.ReasonRemovalRefused, "ProtectQuorum", "Refused to remove the member from etcd: %s", d.Reason)
		return false, nil
	}
	if err := c.MemberRemove(rctx, id); err != nil && !errors.Is(err, etcd.ErrMemberNotFound) {
		r.setRemovalProblem(s, "etcd refused the removal (will retry): "+err.Error())
		return false, nil
	}
	r.event(m, false, "MemberRemoved", "RemoveMember", "Removed member %s from etcd", etcd.FormatID(id))
	logger(ctx, m)("Removed member from etcd", "memberID", etcd.FormatID(id))
	return true, nil
}

func (r *Reconciler) setRemovalProblem(s *state, msg string) {
	set(s, conditions.Ready, false, conditions.ReasonRemovalRefused, "Leaving the cluster is on hold: "+msg)
}

func findMember(list *etcd.MemberList, m *v1alpha2.EtcdMember) (uint64, bool) {
	want, _ := etcd.ParseID(m.Status.MemberID)
	url := build.PeerURL(m)
	for _, em := range list.Members {
		if (want != 0 && em.ID == want) || slices.Contains(em.PeerURLs, url) {
			return em.ID, true
		}
	}
	return 0, false
}

// votersOf lists etcd's voters with their health: the member leaving counts
// by name (quorum.Remove drops it), the others are healthy when Ready.
func votersOf(list *etcd.MemberList, leaving *v1alpha2.EtcdMember, others []*v1alpha2.EtcdMember) []quorum.Voter {
	var out []quorum.Voter
	for _, em := range list.Members {
		if em.IsLearner {
			continue
		}
		v := quorum.Voter{Name: fmt.Sprintf("id:%x", em.ID)}
		if slices.Contains(em.PeerURLs, build.PeerURL(leaving)) {
			v.Name = leaving.Name
		}
		for _, o := range others {
			if slices.Contains(em.PeerURLs, build.PeerURL(o)) {
				v = quorum.Voter{Name: o.Name, Healthy: conditions.IsTrue(o.Status.Conditions, conditions.Ready) &&
					!conditions.IsTrue(o.Status.Conditions, conditions.Lost)}
			}
		}
		out = append(out, v)
	}
	return out
}
