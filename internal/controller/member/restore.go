package member

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// restoreRefused says why a restored seed's Pod may not be created: without
// the operator image there is no agent to restore with, and a seed started
// without its restore would form an empty cluster that looks restored.
func (r *Reconciler) restoreRefused(s *state) string {
	if s.member.Spec.Restore == nil || r.OperatorImage != "" {
		return ""
	}
	return "The cluster restores a snapshot, which needs the operator image to run the restore agent: " +
		"start the operator with --operator-image (the Helm chart sets it); the seed is not started until then"
}

// restoreState reports on a restored seed whose Pod has not started etcd
// yet, from its init containers: ok is false when there is nothing to say
// about the restore.
func restoreState(pod *corev1.Pod) (reason, message string, ok bool) {
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != manifest.RestoreContainer && cs.Name != manifest.InstallToolsContainer {
			continue
		}
		if reason, message, ok := restoreContainerState(cs); ok {
			return reason, message, true
		}
	}
	return "", "", false
}

func restoreContainerState(cs corev1.ContainerStatus) (string, string, bool) {
	if t := cs.State.Terminated; t != nil && t.ExitCode == 0 {
		return "", "", false
	}
	// A failed attempt is reported while the next one waits in back-off,
	// and while it runs again.
	if t := lastFailure(cs); t != nil {
		if res, ok := report.Parse(t.Message); ok && res.Failed() {
			return conditions.ReasonRestoreFailed, fmt.Sprintf("Restoring the snapshot failed (%s): %s", res.Reason, res.Message), true
		}
		return conditions.ReasonRestoreFailed, fmt.Sprintf("Init container %s failed with exit code %d: %s", cs.Name, t.ExitCode, t.Message), true
	}
	switch {
	case cs.State.Waiting != nil && cs.State.Waiting.Reason != "PodInitializing":
		w := cs.State.Waiting
		return conditions.ReasonRestoreFailed, fmt.Sprintf("Init container %s is waiting: %s %s", cs.Name, w.Reason, w.Message), true
	case cs.State.Running != nil && cs.Name == manifest.RestoreContainer:
		return conditions.ReasonRestoring, "Restoring the data directory from the snapshot", true
	}
	return "", "", false
}

// lastFailure is the container's latest failed run, if its latest run
// failed.
func lastFailure(cs corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if t := cs.State.Terminated; t != nil {
		return t
	}
	if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
		return t
	}
	return nil
}

// reportRestore sets the member's Ready condition from its restore, with a
// Warning Event each time the failure says something new.
func (r *Reconciler) reportRestore(s *state) bool {
	reason, message, ok := restoreState(s.pod)
	if !ok {
		return false
	}
	prev := conditions.Get(s.member.Status.Conditions, conditions.Ready)
	if reason == conditions.ReasonRestoreFailed && (prev == nil || prev.Message != message) {
		r.event(s.member, true, conditions.ReasonRestoreFailed, "Restore", "%s", message)
		r.Metrics.RestoreFinished(s.member.Namespace, s.member.Spec.ClusterName, restoreFailure(message))
	}
	set(s, conditions.Ready, false, reason, message)
	return true
}

// restoreFailure is the result label of a failed restore: the agent's
// reason when it gave one, else a word for what the init container did.
func restoreFailure(message string) string {
	const agent = "Restoring the snapshot failed ("
	if rest, ok := strings.CutPrefix(message, agent); ok {
		if reason, _, ok := strings.Cut(rest, ")"); ok {
			return reason
		}
	}
	if strings.Contains(message, "is waiting") {
		return "InitContainerWaiting"
	}
	return "InitContainerFailed"
}
