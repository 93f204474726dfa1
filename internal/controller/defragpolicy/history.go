package defragpolicy

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/recurring"
)

// finishedAt orders finished runs: by completion, or by creation for a run
// that finished without recording when.
func finishedAt(d v1alpha2.EtcdDefrag) time.Time {
	if d.Status.CompletedAt != nil {
		return d.Status.CompletedAt.Time
	}
	return d.CreationTimestamp.Time
}

// expired picks the finished runs beyond historyLimit, the oldest first to
// go. Without a limit nothing is picked: each run's TTL decides.
func expired(p *pass) []v1alpha2.EtcdDefrag {
	limit := p.policy.Spec.HistoryLimit
	if limit == nil {
		return nil
	}
	var done []v1alpha2.EtcdDefrag
	for _, d := range p.runs {
		if finished(&d) {
			done = append(done, d)
		}
	}
	return recurring.Expired(done, int(*limit), finishedAt)
}

// trimHistory deletes the expired runs, also while the policy is suspended.
func (r *Reconciler) trimHistory(ctx context.Context, p *pass) error {
	for _, d := range expired(p) {
		if err := r.Client.Delete(ctx, &d, client.Preconditions{UID: &d.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting old run %s: %w", d.Name, err)
		}
		logger(ctx, p.policy)("Deleted a finished run beyond historyLimit", "etcddefrag", d.Name, "phase", d.Status.Phase)
	}
	return nil
}
