package sandbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestJobTerminationMessage: a Job's Pod runs to completion, the Job
// completes, and the message its container wrote reaches the Pod status;
// with FallbackToLogsOnError a failed container's log tail does.
func TestJobTerminationMessage(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	backoff := int32(0)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "snapshot"},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "agent", Image: helperImage, Command: []string{"/bin/helper", "terminate", `{"revision":42}`},
				}},
			}},
		},
	}
	if _, err := k.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the Job to complete", func() (bool, string) {
		j, err := k.BatchV1().Jobs(ns).Get(ctx, "snapshot", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, "succeeded=" + itoa(j.Status.Succeeded) + " failed=" + itoa(j.Status.Failed)
	})
	pods, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=snapshot"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("job pods: %v (%v)", pods, err)
	}
	p := pods.Items[0]
	term := p.Status.ContainerStatuses[0].State.Terminated
	if p.Status.Phase != corev1.PodSucceeded || term == nil || term.Message != `{"revision":42}` || term.Reason != "Completed" {
		t.Errorf("pod %s, want Succeeded with the message: %s", p.Name, podSummary(&p))
	}

	createPod(t, ns, helperPod("fails", []string{"exit", "2", "cannot reach the bucket"}, func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}))
	failed := waitPod(t, ns, "fails", 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	// The kubelet hands over the log's tail as it is, newline included.
	if term := failed.Status.ContainerStatuses[0].State.Terminated; term.Message != "cannot reach the bucket\n" || term.ExitCode != 2 {
		t.Errorf("fallback message %q exit %d", term.Message, term.ExitCode)
	}
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
