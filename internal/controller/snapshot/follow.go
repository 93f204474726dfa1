package snapshot

import (
	"context"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// follow reports on the snapshot's Job and, once it finished, records the
// agent's result.
func (r *Reconciler) follow(ctx context.Context, p *pass, job *batchv1.Job) (ctrl.Result, error) {
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != p.snap.UID {
		r.fail(p, conditions.ReasonJobNameTaken, fmt.Sprintf("Job %s exists and belongs to something else; delete it, or name the snapshot differently", job.Name))
		return ctrl.Result{}, nil
	}
	if p.snap.Status.Phase != v1alpha2.SnapshotStarted {
		// The Job was made and the status write after it lost.
		p.snap.Status.Phase = v1alpha2.SnapshotStarted
		p.snap.Status.StartTime = &job.CreationTimestamp
	}
	pods, err := r.jobPods(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case jobFinished(job, batchv1.JobComplete):
		return r.complete(p, job, pods), nil
	case jobFinished(job, batchv1.JobFailed):
		r.failed(p, job, pods)
		return ctrl.Result{}, nil
	}
	p.ready(false, conditions.ReasonJobRunning, running(job, pods))
	return ctrl.Result{}, nil
}

func jobFinished(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobPods lists the Job's Pods, newest first.
func (r *Reconciler) jobPods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("listing the Job's pods: %w", err)
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	return pods, nil
}

// agentResult is the result the snapshot agent left in a Pod's termination
// message.
func agentResult(pod *corev1.Pod) (report.Result, bool) {
	return containerResult(pod, manifest.SnapshotAgentContainer)
}

// containerResult is the result an agent left in its container's
// termination message.
func containerResult(pod *corev1.Pod, container string) (report.Result, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Terminated != nil {
			return report.Parse(cs.State.Terminated.Message)
		}
	}
	return report.Result{}, false
}

// complete records the stored snapshot.
func (r *Reconciler) complete(p *pass, job *batchv1.Job, pods []corev1.Pod) ctrl.Result {
	var res report.Result
	found := false
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodSucceeded {
			if res, found = agentResult(&pods[i]); found {
				break
			}
		}
	}
	if !found || res.Failed() || res.URI == "" {
		if done := job.Status.CompletionTime; done != nil && p.now.Sub(done.Time) > resultGiveUp {
			r.fail(p, conditions.ReasonJobFailed, fmt.Sprintf("Job %s succeeded but its Pod left no result; the snapshot may be stored, but is not recorded", job.Name))
			return ctrl.Result{}
		}
		// The Pod's final status reaches the cache just after the Job's.
		return ctrl.Result{RequeueAfter: resultLag}
	}
	s := p.snap
	s.Status.Artifact = &v1alpha2.SnapshotArtifact{URI: res.URI, SizeBytes: res.SizeBytes, Checksum: res.Checksum, EtcdVersion: res.EtcdVersion,
		Revision: res.Revision, KeyCount: res.KeyCount, CompactRevision: res.CompactRevision}
	if res.KVHash != nil {
		s.Status.Artifact.KVHash = ptr.To(int64(*res.KVHash))
	}
	s.Status.Phase = v1alpha2.SnapshotComplete
	s.Status.CompletionTime = &metav1.Time{Time: p.now}
	if res.PrunedCount > 0 || res.PruneError != "" {
		s.Status.Retention = &v1alpha2.RetentionResult{Pruned: res.Pruned, PrunedCount: int32(res.PrunedCount), Error: res.PruneError} //nolint:gosec // a count of files
	}
	msg := fmt.Sprintf("Stored %s (%d bytes, etcd %s)", res.URI, res.SizeBytes, res.EtcdVersion)
	p.ready(true, conditions.ReasonSnapshotStored, msg)
	conditions.Record(r.Recorder, s, false, conditions.ReasonSnapshotStored, "Snapshot", "%s", msg)
	if res.PruneError != "" {
		conditions.Record(r.Recorder, s, true, conditions.ReasonRetentionFailed, "Prune", "Retention could not delete every old snapshot: %s", res.PruneError)
	}
	return ctrl.Result{}
}

// failed records why the Job gave up: the agent's reason when it left one,
// the Job's own otherwise (a deadline, a Pod that never started).
func (r *Reconciler) failed(p *pass, job *batchv1.Job, pods []corev1.Pod) {
	for i := range pods {
		if res, ok := agentResult(&pods[i]); ok && res.Failed() {
			r.fail(p, res.Reason, res.Message)
			return
		}
	}
	msg := fmt.Sprintf("Job %s failed", job.Name)
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			msg = fmt.Sprintf("Job %s failed (%s): %s", job.Name, c.Reason, c.Message)
		}
	}
	if len(pods) > 0 {
		msg += "; " + podProblem(&pods[0])
	}
	r.fail(p, conditions.ReasonJobFailed, msg)
}

// running says how the Job is doing: the last attempt's failure while it
// retries, or why its Pod is not running.
func running(job *batchv1.Job, pods []corev1.Pod) string {
	msg := fmt.Sprintf("Job %s is running", job.Name)
	for i := range pods {
		if res, ok := agentResult(&pods[i]); ok && res.Failed() {
			return fmt.Sprintf("%s; an attempt failed (%s): %s", msg, res.Reason, res.Message)
		}
	}
	if len(pods) > 0 {
		if problem := podProblem(&pods[0]); problem != "" {
			return msg + "; " + problem
		}
	}
	return msg
}

// podProblem says why a Pod is not running, or "".
func podProblem(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
			return strings.TrimSpace(fmt.Sprintf("pod %s waits: %s %s", pod.Name, w.Reason, w.Message))
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("pod %s cannot be scheduled: %s", pod.Name, c.Message)
		}
	}
	return ""
}

// removeFinishedJob deletes the Job of a recorded snapshot, and its Pod
// with it: the result is in the snapshot's status now.
func (r *Reconciler) removeFinishedJob(ctx context.Context, s *v1alpha2.EtcdSnapshot) error {
	return r.removeJob(ctx, s, jobKey(s))
}

// removeJob deletes a Job of the snapshot, and its Pods with it.
func (r *Reconciler) removeJob(ctx context.Context, s *v1alpha2.EtcdSnapshot, key client.ObjectKey) error {
	job := &batchv1.Job{}
	if err := r.Client.Get(ctx, key, job); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != s.UID || job.DeletionTimestamp != nil {
		return nil
	}
	err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}
