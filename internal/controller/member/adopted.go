package member

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Adopted Pods: etcd-migrate hands the Pods of a legacy cluster to their
// EtcdMembers as they run, and the operator leaves them alone until a
// roll-out restarts them. Their etcd container writes no termination
// message, so when it keeps failing the operator cannot tell why (a lost
// data directory reads like any crash). Such a Pod is replaced by the
// operator's own Pod on the same claim, whose container reports its last
// log lines: a lost data directory is then recognised and the member
// replaced; any other cause leaves the member running as the operator's Pod.
// The member is down already, so no voter that counts as healthy goes.

// adoptedRestartLimit is how many failed starts an adopted Pod's etcd gets
// before its Pod is replaced: more than a crash or two on the way up.
const adoptedRestartLimit = 3

// adoptedPodFailing reports an adopted Pod (one the operator did not render:
// it carries the adopted marker, or no template hash) whose etcd container
// is down after failing adoptedRestartLimit times with no word of why.
func adoptedPodFailing(pod *corev1.Pod) bool {
	adopted := pod.Annotations[manifest.AnnotationAdoptedPod] == "true" || pod.Annotations[manifest.AnnotationTemplateHash] == ""
	if !adopted || pod.DeletionTimestamp != nil {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != manifest.EtcdContainer || cs.State.Running != nil || cs.RestartCount < adoptedRestartLimit {
			continue
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 && t.Message == "" {
			return true
		}
	}
	return false
}

// replaceAdoptedPod deletes the failing adopted Pod; the Pod's deletion
// brings the member back here, and it gets the operator's Pod.
func (r *Reconciler) replaceAdoptedPod(ctx context.Context, s *state) (ctrl.Result, error) {
	pod := s.pod
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting failing adopted pod %s: %w", pod.Name, err)
	}
	msg := fmt.Sprintf("The adopted Pod %s keeps failing without saying why; it is replaced by the operator's own Pod on the same claim", pod.Name)
	r.event(s.member, true, "AdoptedPodReplaced", "ReplacePod", "%s", msg)
	logger(ctx, s.member)(msg)
	r.setNotReady(s, conditions.ReasonPodNotReady, msg)
	return ctrl.Result{}, nil
}
