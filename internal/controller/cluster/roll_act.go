package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// The actions of a roll-out (roll.go plans them): a member restarted on
// its next template, one at a time, and etcd's downgrade switched on or
// off.

// restart brings one member to the target: leadership handed over if it
// leads, its spec re-templated, its Pod evicted through the Eviction API
// (the PodDisruptionBudget has the last word, so a concurrent drain cannot
// take a second voter), and the member controller makes a new one from the
// new spec on the same claim.
func (r *Reconciler) restart(ctx context.Context, w *world, c *change) outcome {
	m := c.member
	if o, ok := r.handOver(ctx, w, m, c.handOver); !ok {
		return o
	}
	if !podOutdated(w, m) {
		// Its Pod runs its spec: move the spec one step on (with changed
		// Secrets too, so that one restart brings both).
		if err := r.nextTemplate(ctx, w, m); err != nil {
			return outcome{err: err}
		}
	}
	pod := w.pods[m.Name]
	changed := w.changedSecrets(m)
	if pod == nil || pod.DeletionTimestamp != nil || (!podOutdated(w, m) && len(changed) == 0) {
		// Only the storage size changed (grown in place), or the Pod is
		// already going.
		return outcome{}
	}
	cause, why := v1alpha2.RollOutCauseSpec, fmt.Sprintf("on the new target (etcd %s)", m.Spec.Version)
	switch {
	case !podOutdated(w, m):
		cause, why = v1alpha2.RollOutCauseSecrets, fmt.Sprintf("to load changed certificate material (Secret %s)", strings.Join(changed, ", "))
	case !manifest.PodTLSCurrent(pod, m) && pod.Annotations[manifest.AnnotationTemplateHash] == manifest.TemplateHash(m):
		cause, why = v1alpha2.RollOutCauseTLSHandover, handoverStep(m, w.handover.final)
	}
	if o, ok := r.evict(ctx, pod); !ok {
		return o
	}
	r.event(w.cluster, false, conditions.ReasonRollingOut, "Restart", "Restarting member %s %s", m.Name, why)
	r.event(m, false, conditions.ReasonRollingOut, "Restart", "Restarting %s", why)
	logf(ctx, w)("Restarting member for the roll-out", "member", m.Name, "version", m.Spec.Version, "cause", cause)
	// The Pod's deletion and the new Pod's readiness bring the next pass.
	return outcome{learned: learned{rollOut: restartRecorded(w, m, cause, why)}}
}

// evict asks the API server to evict the Pod, which it does only while the
// PodDisruptionBudget allows a disruption. It reports false with the outcome
// when the budget refused.
func (r *Reconciler) evict(ctx context.Context, pod *corev1.Pod) (outcome, bool) {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := r.Client.SubResource("eviction").Create(ctx, pod, ev)
	switch {
	case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return outcome{}, true
	case apierrors.IsTooManyRequests(err):
		// The budget's status is not watched: look again shortly.
		return outcome{progress: &finding{conditions.ReasonRollingOut, fmt.Sprintf(
			"The roll-out waits: the PodDisruptionBudget allows no disruption of %s now (another voluntary disruption, a drain say, is under way)", pod.Name)},
			requeue: unreachableRetry}, false
	}
	return outcome{err: fmt.Errorf("evicting pod %s: %w", pod.Name, err)}, false
}

// completeRollOut records the end of the roll-out status.lastRollOut
// describes; report writes it.
func (r *Reconciler) completeRollOut(w *world, c *change) outcome {
	lr := w.cluster.Status.LastRollOut.DeepCopy()
	lr.CompletionTime = &metav1.Time{Time: w.now}
	r.event(w.cluster, false, c.reason, "CompleteRollOut", "%s", c.message)
	return outcome{learned: learned{rollOut: lr}}
}

// restartRecorded is status.lastRollOut with a restart noted, a new
// record when the last one completed.
func restartRecorded(w *world, m *v1alpha2.EtcdMember, cause, why string) *v1alpha2.RollOutStatus {
	lr := w.cluster.Status.LastRollOut.DeepCopy()
	if lr == nil || lr.CompletionTime != nil {
		lr = &v1alpha2.RollOutStatus{StartTime: metav1.Time{Time: w.now}}
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
	return lr
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
	case !manifest.Retemplate(m, w.cluster.Status.Observed) && !w.handoverPending(m):
		return nil
	}
	if w.handoverPending(m) {
		m.Spec.TLS = manifest.NextTLS(m, w.handover.final, manifest.HandoverSecretName(w.cluster.Name))
	}
	if err := r.Client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("re-templating member %s: %w", m.Name, err)
	}
	return nil
}

// downgrade enables etcd's downgrade to a target one minor down (so that
// members of the older minor may run; the roll follows), or cancels one for
// a target that is no longer down.
func (r *Reconciler) downgrade(ctx context.Context, w *world, c *change) outcome {
	target, err := version.Parse(c.version)
	if err != nil {
		return outcome{err: err}
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		if c.kind == cancelDowngrade {
			_, err := cl.Downgrade(ctx, etcd.DowngradeCancel, target.String())
			return err
		}
		if _, err := cl.Downgrade(ctx, etcd.DowngradeValidate, target.String()); err != nil {
			return err
		}
		_, err := cl.Downgrade(ctx, etcd.DowngradeEnable, target.String())
		return err
	})
	op, what := "downgrade-enable", "enabling etcd's downgrade to "+target.MinorString()
	if c.kind == cancelDowngrade {
		op, what = "downgrade-cancel", "cancelling etcd's downgrade to "+target.MinorString()
	}
	r.Metrics.MembershipOp(w.cluster, op, err)
	nothingToCancel := c.kind == cancelDowngrade && err != nil && strings.Contains(err.Error(), "no inflight downgrade job")
	if err != nil && !nothingToCancel {
		return r.etcdFailed(ctx, w, what, err)
	}
	if c.kind == cancelDowngrade {
		r.event(w.cluster, false, "DowngradeCancelled", "Downgrade", "Cancelled etcd's downgrade to %s: the target is %s", target.MinorString(), w.cluster.Status.Observed.Version)
	} else {
		r.event(w.cluster, false, "DowngradeEnabled", "Downgrade", "Enabled etcd's downgrade to %s; members are rolled to %s next", target.MinorString(), target)
	}
	// etcd changes its cluster version on its own: look again shortly.
	return outcome{requeue: etcdRetry}
}
