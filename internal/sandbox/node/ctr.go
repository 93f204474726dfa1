package node

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
)

// ctr is the node's record of one container across its restarts.
type ctr struct {
	spec   corev1.Container
	isInit bool

	restartCount int32
	everStarted  bool
	proc         *proc
	state        corev1.ContainerState
	exit         *corev1.ContainerStateTerminated // newest termination
	lastTerm     *corev1.ContainerStateTerminated // shown as lastState
	ready        bool
	started      bool
	imageID      string

	nextStart time.Time     // no start before (back-off)
	backoff   time.Duration // delay after the next failure
	pullDelay time.Duration // image pull back-off
}

// proc is one running instance of a container.
type proc struct {
	cmd        *exec.Cmd
	pid        int
	instance   int32
	startedAt  time.Time
	exited     chan struct{}
	execBase   container.ExecSpec
	stopProbes context.CancelFunc
	logs       *logWriter
	termLog    string
	errorFile  string
}

func newCtr(spec corev1.Container, isInit bool) *ctr {
	reason := "ContainerCreating"
	if isInit {
		reason = "PodInitializing"
	}
	return &ctr{spec: spec, isInit: isInit, state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func (c *ctr) succeeded() bool { return c.proc == nil && c.exit != nil && c.exit.ExitCode == 0 }

func (c *ctr) view(uid types.UID, isInit bool) containerView {
	v := containerView{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: c.imageID, State: c.state,
		LastTerminated: c.lastTerm, RestartCount: c.restartCount, Ready: c.ready && c.proc != nil && !isInit,
		Started: c.proc != nil && c.started,
	}
	if c.everStarted {
		v.ContainerID = fmt.Sprintf("sandbox://%s/%s/%d", uid, c.spec.Name, c.restartCount)
	}
	return v
}

// shouldRestart applies the restart policy to an exited container; init
// containers are never restarted after success.
func shouldRestart(policy corev1.RestartPolicy, isInit bool, exitCode int32) bool {
	switch {
	case isInit:
		return exitCode != 0 && policy != corev1.RestartPolicyNever
	case policy == corev1.RestartPolicyAlways:
		return true
	case policy == corev1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return false
}

// crashBackoff returns the delay before the restart that follows an exit
// and the delay to use after the next one: the first restart is immediate,
// then 10 s doubling up to max, like the kubelet; a container that ran for
// twice max starts over.
func crashBackoff(current, ranFor, maxDelay time.Duration) (delay, next time.Duration) {
	if ranFor > 2*maxDelay {
		current = 0
	}
	if current == 0 {
		return 0, min(10*time.Second, maxDelay)
	}
	return current, min(2*current, maxDelay)
}

// exitState turns a finished process into the container's terminated state.
func exitState(code int32, started, finished time.Time, message, startError string, instance int32) corev1.ContainerStateTerminated {
	t := corev1.ContainerStateTerminated{
		ExitCode: code, StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished),
		Message: message, ContainerID: "",
	}
	switch {
	case startError != "":
		t.Reason, t.Message = "StartError", startError
	case code == 0:
		t.Reason = "Completed"
	default:
		t.Reason = "Error"
	}
	_ = instance
	return t
}

// backoffMessage is the kubelet's CrashLoopBackOff wording.
func backoffMessage(delay time.Duration, c *ctr, pod *corev1.Pod) string {
	return "back-off " + delay.Round(time.Second).String() + " restarting failed container=" + c.spec.Name +
		" pod=" + pod.Name + "_" + pod.Namespace + "(" + string(pod.UID) + ")"
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
