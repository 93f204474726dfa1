package cluster

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// change is one candidate step of the membership state machine. It returns
// a result when it acted (or must wait), nil to let the next candidate try:
// a change refused to protect quorum records why and lets the others go on,
// so a refused deletion never holds the repair of another member.
type change func(ctx context.Context, w *world) (*ctrl.Result, error)

// changeMembership makes at most one change of etcd's membership, trying the
// candidates in order: members leaving (finish what was started), etcd
// members nobody accounts for, lost members, the learner's promotion, a
// member created but not yet added, members that will never join.
func (r *Reconciler) changeMembership(ctx context.Context, w *world) (*ctrl.Result, error) {
	if w.etcdMembers == nil {
		return nil, nil
	}
	for _, c := range []change{
		r.removeLeaving,
		r.removeStrays,
		r.retireLost,
		r.promoteLearner,
		r.addPending,
		r.retireStuckJoiners,
	} {
		res, err := c(ctx, w)
		if err != nil || res != nil {
			return res, err
		}
	}
	// A refused change (w.refused) does not stop the scale step: growing
	// is what makes most refusals go away.
	return nil, nil
}
