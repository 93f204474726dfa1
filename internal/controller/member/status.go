package member

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The member's status: the member controller writes it, but for IsVoter,
// which the cluster controller records when it promotes or seeds a member,
// and MemberID, which a promotion records when the member controller's own
// discovery has not yet. Conditions are set through set, and the status is written once
// per pass, only when it changed.

// writeStatus writes the status when the pass changed it.
func (r *Reconciler) writeStatus(ctx context.Context, s *state) error {
	if equality.Semantic.DeepEqual(s.original.Status, s.member.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, s.member, client.MergeFrom(s.original)); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone while the pass ran (the cluster controller released a
			// member etcd no longer lists): nothing is left to report on.
			return nil
		}
		return fmt.Errorf("writing member status: %w", err)
	}
	return nil
}

// set records a condition with the member's generation.
func set(s *state, typ string, status bool, reason, message string) {
	st := metav1.ConditionFalse
	if status {
		st = metav1.ConditionTrue
	}
	conditions.Set(&s.member.Status.Conditions, s.member.Generation, typ, st, reason, message, s.now)
}

func setPending(s *state) {
	set(s, conditions.Ready, false, conditions.ReasonPending, "Waiting for the cluster controller to add this member to etcd")
}

func (r *Reconciler) setNotReady(s *state, reason, message string) {
	set(s, conditions.Ready, false, reason, message)
}
