package node

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerView is what the node knows about one container, the input of
// the Pod status.
type containerView struct {
	Name           string
	Image          string
	ImageID        string
	ContainerID    string
	State          corev1.ContainerState
	LastTerminated *corev1.ContainerStateTerminated
	RestartCount   int32
	Ready          bool
	Started        bool
}

// podView is the input of buildPodStatus.
type podView struct {
	Pod          *corev1.Pod
	Init         []containerView
	Containers   []containerView
	SandboxReady bool
	PodIP        string
	HostIP       string
	StartTime    *metav1.Time
	Now          metav1.Time
}

// Condition types the node owns; any other condition (PodScheduled,
// DisruptionTarget, readiness gates) is kept as the API has it.
var ownedConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
}

// buildPodStatus computes the Pod status the kubelet would report. It keeps
// each condition's lastTransitionTime while its status is unchanged, so an
// unchanged Pod yields an identical status and no write.
func buildPodStatus(v podView) corev1.PodStatus {
	old := v.Pod.Status
	st := corev1.PodStatus{
		Phase:     podPhase(v.Pod.Spec.RestartPolicy, v.Init, v.Containers),
		HostIP:    v.HostIP,
		StartTime: v.StartTime,
		QOSClass:  old.QOSClass,
		Reason:    old.Reason,
		Message:   old.Message,
	}
	if v.HostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: v.HostIP}}
	}
	if v.PodIP != "" {
		st.PodIP = v.PodIP
		st.PodIPs = []corev1.PodIP{{IP: v.PodIP}}
	}
	st.InitContainerStatuses = containerStatuses(v.Init)
	st.ContainerStatuses = containerStatuses(v.Containers)
	for _, c := range old.Conditions {
		if !slices.Contains(ownedConditions, c.Type) {
			st.Conditions = append(st.Conditions, c)
		}
	}
	for _, c := range podConditions(v, st.Phase) {
		st.Conditions = append(st.Conditions, keepTransition(old.Conditions, c, v.Now))
	}
	return st
}

func containerStatuses(views []containerView) []corev1.ContainerStatus {
	if len(views) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(views))
	for _, c := range views {
		started := c.Started
		s := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.ImageID, ContainerID: c.ContainerID,
			State: c.State, Ready: c.Ready, RestartCount: c.RestartCount, Started: &started,
		}
		if c.LastTerminated != nil {
			s.LastTerminationState.Terminated = c.LastTerminated
		}
		out = append(out, s)
	}
	return out
}

// initDone reports whether every init container has succeeded.
func initDone(init []containerView) bool {
	for _, c := range init {
		if t := c.State.Terminated; t == nil || t.ExitCode != 0 {
			return false
		}
	}
	return true
}

// podPhase follows the kubelet's rules: Pending until the init containers
// succeed and every container has started once, Running while any runs or
// will be restarted, then Succeeded or Failed by restart policy.
func podPhase(policy corev1.RestartPolicy, init, containers []containerView) corev1.PodPhase {
	for _, c := range init {
		if t := c.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		if t := c.State.Terminated; t != nil && policy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodPending
	}
	var running, waiting, stopped, failed int
	for _, c := range containers {
		switch {
		case c.State.Running != nil:
			running++
		case c.State.Terminated != nil:
			stopped++
			if c.State.Terminated.ExitCode != 0 {
				failed++
			}
		case c.LastTerminated != nil:
			stopped++
			if c.LastTerminated.ExitCode != 0 {
				failed++
			}
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case policy == corev1.RestartPolicyAlways:
		return corev1.PodRunning
	case failed == 0:
		return corev1.PodSucceeded
	case policy == corev1.RestartPolicyOnFailure:
		return corev1.PodRunning
	}
	return corev1.PodFailed
}

func podConditions(v podView, phase corev1.PodPhase) []corev1.PodCondition {
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
		if !ok {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, msg
		}
		return c
	}
	done := initDone(v.Init)
	unready := unreadyNames(v.Containers)
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	out := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, v.SandboxReady, "", ""),
		cond(corev1.PodInitialized, done, "ContainersNotInitialized",
			fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incompleteNames(v.Init), " "))),
	}
	readyMsg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	containersReady := cond(corev1.ContainersReady, len(unready) == 0 && done, "ContainersNotReady", readyMsg)
	ready := cond(corev1.PodReady, len(unready) == 0 && done, "ContainersNotReady", readyMsg)
	if containersReady.Status == corev1.ConditionTrue {
		if missing := unmetGates(v.Pod); len(missing) > 0 {
			ready = cond(corev1.PodReady, false, "ReadinessGatesNotReady",
				fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", missing[0]))
		}
	}
	if terminal {
		containersReady = cond(corev1.ContainersReady, false, "PodCompleted", "")
		ready = cond(corev1.PodReady, false, "PodCompleted", "")
	}
	return append(out, containersReady, ready)
}

func unreadyNames(cs []containerView) []string {
	var out []string
	for _, c := range cs {
		if !c.Ready {
			out = append(out, c.Name)
		}
	}
	return out
}

func incompleteNames(cs []containerView) []string {
	var out []string
	for _, c := range cs {
		if t := c.State.Terminated; t == nil || t.ExitCode != 0 {
			out = append(out, c.Name)
		}
	}
	return out
}

// unmetGates lists readiness gates whose condition is not True.
func unmetGates(pod *corev1.Pod) []string {
	var out []string
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			out = append(out, string(g.ConditionType))
		}
	}
	return out
}

func keepTransition(old []corev1.PodCondition, c corev1.PodCondition, now metav1.Time) corev1.PodCondition {
	c.LastTransitionTime = now
	for _, o := range old {
		if o.Type == c.Type && o.Status == c.Status {
			c.LastTransitionTime = o.LastTransitionTime
			c.LastProbeTime = o.LastProbeTime
		}
	}
	return c
}
