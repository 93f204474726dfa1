package snapshot

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

func verifyJobKey(s *v1alpha2.EtcdSnapshot) client.ObjectKey {
	return client.ObjectKey{Namespace: s.Namespace, Name: manifest.VerifyJobName(s.Name)}
}

// verify runs the verification of a Complete snapshot that asks for one,
// once: its Job is found by name after any restart, and a verification
// that passed or failed is final.
func (r *Reconciler) verify(ctx context.Context, p *pass) (ctrl.Result, error) {
	s := p.snap
	if c := conditions.Get(s.Status.Conditions, conditions.Verified); c != nil && c.Status != metav1.ConditionUnknown {
		if c.Status == metav1.ConditionTrue {
			// Its findings are in the status; a failed one's Job stays
			// for its logs.
			return ctrl.Result{}, r.removeJob(ctx, s, verifyJobKey(s))
		}
		return ctrl.Result{}, nil
	}
	job := &batchv1.Job{}
	err := r.Client.Get(ctx, verifyJobKey(s), job)
	switch {
	case err == nil:
		return r.followVerification(ctx, p, job)
	case client.IgnoreNotFound(err) != nil:
		return ctrl.Result{}, fmt.Errorf("reading the verification Job: %w", err)
	case s.Status.Verification != nil && s.Status.Verification.StartTime != nil:
		return r.verifyJobGone(ctx, p)
	}
	return r.startVerification(ctx, p)
}

// startVerification checks that the snapshot can be verified and creates
// the verification Job.
func (r *Reconciler) startVerification(ctx context.Context, p *pass) (ctrl.Result, error) {
	s := p.snap
	if r.OperatorImage == "" {
		r.verifyFailed(p, conditions.ReasonVerificationFailed,
			"The operator has no image to run the verification agent with: start it with --operator-image (the Helm chart sets it)")
		return ctrl.Result{}, nil
	}
	if s.Status.Artifact.EtcdVersion == "" {
		r.verifyFailed(p, conditions.ReasonVerificationFailed,
			"The snapshot records no etcd version, so there is no etcdutl release to restore it with")
		return ctrl.Result{}, nil
	}
	src, err := manifest.ArtifactSource(s)
	if err != nil {
		r.verifyFailed(p, conditions.ReasonVerificationFailed, fmt.Sprintf("The stored snapshot cannot be located: %v", err))
		return ctrl.Result{}, nil
	}
	reason, msg, err := r.preflight(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if reason != "" {
		r.verifyFailed(p, conditions.ReasonVerificationFailed, fmt.Sprintf("%s: %s", reason, msg))
		return ctrl.Result{}, nil
	}
	pullSecrets, err := r.pullSecrets(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	job := manifest.VerifyJob(s, src, pullSecrets, r.OperatorImage, r.EtcdRepository)
	if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating the verification Job: %w", err)
	}
	s.Status.Verification = &v1alpha2.SnapshotVerification{StartTime: &metav1.Time{Time: p.now}}
	p.verified(metav1.ConditionUnknown, conditions.ReasonVerificationRunning,
		fmt.Sprintf("Job %s restores %s with etcd %s's etcdutl", job.Name, s.Status.Artifact.URI, s.Status.Artifact.EtcdVersion))
	conditions.Record(r.Recorder, s, false, conditions.ReasonVerificationRunning, "Verify", "Created Job %s to verify %s", job.Name, s.Status.Artifact.URI)
	logger(ctx, s)("Created the verification Job", "job", job.Name)
	return ctrl.Result{}, nil
}

// pullSecrets are the cluster's, for the etcd image; none once the
// cluster is gone (its snapshots stay and may still be verified).
func (r *Reconciler) pullSecrets(ctx context.Context, s *v1alpha2.EtcdSnapshot) ([]corev1.LocalObjectReference, error) {
	c := &v1alpha2.EtcdCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.ClusterRef.Name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading cluster: %w", err)
	}
	return manifest.ObservedPullSecrets(c), nil
}

// followVerification reports on the verification Job and, once it
// finished, records what it found.
func (r *Reconciler) followVerification(ctx context.Context, p *pass, job *batchv1.Job) (ctrl.Result, error) {
	s := p.snap
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != s.UID {
		r.verifyFailed(p, conditions.ReasonVerificationFailed, fmt.Sprintf("Job %s exists and belongs to something else; delete it, then create the snapshot again to verify it", job.Name))
		return ctrl.Result{}, nil
	}
	if s.Status.Verification == nil || s.Status.Verification.StartTime == nil {
		// The Job was made and the status write after it lost.
		start := job.CreationTimestamp
		if start.IsZero() {
			start = metav1.Time{Time: p.now}
		}
		s.Status.Verification = &v1alpha2.SnapshotVerification{StartTime: &start}
	}
	pods, err := r.jobPods(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case jobFinished(job, batchv1.JobComplete):
		return r.verificationDone(p, job, pods), nil
	case jobFinished(job, batchv1.JobFailed):
		r.verificationJobFailed(p, job, pods)
		return ctrl.Result{}, nil
	}
	msg := fmt.Sprintf("Job %s is running", job.Name)
	if len(pods) > 0 {
		if problem := podProblem(&pods[0]); problem != "" {
			msg += "; " + problem
		}
	}
	p.verified(metav1.ConditionUnknown, conditions.ReasonVerificationRunning, msg)
	return ctrl.Result{}, nil
}

// verificationDone records the findings of a Job that succeeded.
func (r *Reconciler) verificationDone(p *pass, job *batchv1.Job, pods []corev1.Pod) ctrl.Result {
	var res report.Result
	found := false
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodSucceeded {
			if res, found = containerResult(&pods[i], manifest.VerifyAgentContainer); found {
				break
			}
		}
	}
	if !found || res.Failed() {
		if done := job.Status.CompletionTime; done != nil && p.now.Sub(done.Time) > resultGiveUp {
			r.verifyFailed(p, conditions.ReasonVerificationFailed, fmt.Sprintf("Job %s succeeded but its Pod left no result", job.Name))
			return ctrl.Result{}
		}
		// The Pod's final status reaches the cache just after the Job's.
		return ctrl.Result{RequeueAfter: resultLag}
	}
	v := p.snap.Status.Verification
	// The image the Job ran is the etcd release whose etcdutl restored it.
	v.Checksum, v.Revision, v.EtcdVersion = res.Checksum, res.Revision, p.snap.Status.Artifact.EtcdVersion
	if res.KeyCount != nil {
		v.KeyCount = *res.KeyCount
	}
	if res.KVHash != nil {
		v.KVHash = ptr.To(int64(*res.KVHash))
	}
	v.CompletionTime = &metav1.Time{Time: p.now}
	msg := fmt.Sprintf("Restored %s with etcdutl %s: revision %d, %d keys", res.URI, v.EtcdVersion, res.Revision, v.KeyCount)
	if a := p.snap.Status.Artifact; a.Revision != 0 {
		msg = fmt.Sprintf("%s; at revision %d the count and hash of the keys match what was recorded when the snapshot was taken", msg, a.Revision)
	}
	if res.Message != "" {
		msg += " (" + res.Message + ")"
	}
	p.verified(metav1.ConditionTrue, conditions.ReasonVerificationPassed, msg)
	p.verdict = metrics.VerificationPassed
	conditions.Record(r.Recorder, p.snap, false, conditions.ReasonVerificationPassed, "Verify", "%s", msg)
	return ctrl.Result{}
}

// verificationJobFailed records why: the agent's reason when it left one,
// the Job's own otherwise.
func (r *Reconciler) verificationJobFailed(p *pass, job *batchv1.Job, pods []corev1.Pod) {
	for i := range pods {
		if res, ok := containerResult(&pods[i], manifest.VerifyAgentContainer); ok && res.Failed() {
			r.verifyFailed(p, verificationReason(res.Reason), res.Message)
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
		if problem := podProblem(&pods[0]); problem != "" {
			msg += "; " + problem
		}
	}
	r.verifyFailed(p, conditions.ReasonVerificationFailed, msg)
}

// verificationReason keeps the reasons the Verified condition documents;
// the agent reports no other, but an older one might.
func verificationReason(reason string) string {
	switch reason {
	case conditions.ReasonArtifactMissing, conditions.ReasonMismatch, conditions.ReasonRestoreFailed:
		return reason
	}
	return conditions.ReasonVerificationFailed
}

// verifyJobGone fails a verification whose Job is gone, once the API
// server confirms it: a snapshot is verified once.
func (r *Reconciler) verifyJobGone(ctx context.Context, p *pass) (ctrl.Result, error) {
	if err := r.APIReader.Get(ctx, verifyJobKey(p.snap), &batchv1.Job{}); client.IgnoreNotFound(err) != nil || err == nil {
		// Still there (the cache lags), or unknown: look again.
		return ctrl.Result{RequeueAfter: resultLag}, client.IgnoreNotFound(err)
	}
	r.verifyFailed(p, conditions.ReasonVerificationFailed,
		fmt.Sprintf("The verification Job %s was deleted before it reported a result; it is not run again", verifyJobKey(p.snap).Name))
	return ctrl.Result{}, nil
}

// verifyFailed ends the verification as failed with a Warning Event. The
// snapshot stays Complete: it is stored, but not proven restorable.
func (r *Reconciler) verifyFailed(p *pass, reason, message string) {
	s := p.snap
	if s.Status.Verification == nil {
		s.Status.Verification = &v1alpha2.SnapshotVerification{}
	}
	s.Status.Verification.CompletionTime = &metav1.Time{Time: p.now}
	p.verified(metav1.ConditionFalse, reason, message)
	p.verdict = reason
	conditions.Record(r.Recorder, s, true, reason, "Verify", "%s", message)
}

func (p *pass) verified(st metav1.ConditionStatus, reason, message string) {
	conditions.Set(&p.snap.Status.Conditions, p.snap.Generation, conditions.Verified, st, reason, message, p.now)
}
