//go:build linux

package procnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// podRunner is one Pod on a node: it prepares the volumes, runs the init
// containers in order and then the containers, probes them, restarts them
// as the restart policy says, reports all of it in the Pod's status, and
// on deletion stops the processes and deletes the Pod.
type podRunner struct {
	k        *kubelet
	uid      types.UID
	ns, name string
	ip       string
	dir      string

	ctx    context.Context
	cancel context.CancelFunc
	// stopping closes when the Pod is being deleted; its grace is in grace.
	stopping chan struct{}
	stopOnce sync.Once
	grace    time.Duration
	done     chan struct{}

	mu       sync.Mutex
	pod      *corev1.Pod // the newest copy seen
	init     []corev1.ContainerStatus
	main     []corev1.ContainerStatus
	phase    corev1.PodPhase
	initDone bool
	started  metav1.Time
	procs    map[string]*process
	mounts   []string
	// volumes maps a volume's name to its directory on this machine.
	volumes map[string]string
}

func (k *kubelet) startPod(pod *corev1.Pod) *podRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &podRunner{
		k: k, uid: pod.UID, ns: pod.Namespace, name: pod.Name, ip: k.allocateIP(),
		dir: filepath.Join(k.cfg.Dir, "pods", string(pod.UID)), ctx: ctx, cancel: cancel,
		stopping: make(chan struct{}), done: make(chan struct{}), pod: pod.DeepCopy(),
		phase: corev1.PodPending, started: metav1.Now(), procs: map[string]*process{}, volumes: map[string]string{},
	}
	for _, c := range pod.Spec.InitContainers {
		r.init = append(r.init, waiting(c, "PodInitializing", ""))
	}
	for _, c := range pod.Spec.Containers {
		reason := "PodInitializing"
		if len(pod.Spec.InitContainers) == 0 {
			reason = "ContainerCreating"
		}
		r.main = append(r.main, waiting(c, reason, ""))
	}
	go r.run()
	return r
}

func waiting(c corev1.Container, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

// observe takes the newest copy of the Pod; a deletion starts the stop.
func (r *podRunner) observe(pod *corev1.Pod) {
	r.mu.Lock()
	r.pod = pod.DeepCopy()
	r.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		r.stopOnce.Do(func() {
			r.grace = grace
			close(r.stopping)
		})
	}
}

func (r *podRunner) current() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod.DeepCopy()
}

// kill stops the processes at once, for a Pod that is already gone.
func (r *podRunner) kill() {
	r.stopOnce.Do(func() { close(r.stopping) })
	r.cancel()
	<-r.done
}

func (r *podRunner) run() {
	defer close(r.done)
	r.publish()
	if r.prepare() {
		r.runContainers()
	}
	// Stopped: by deletion (processes get their grace), or the Pod ended.
	r.stopProcesses()
	r.unmountAll()
	deleting := false
	select {
	case <-r.stopping:
		deleting = true
	default:
	}
	if deleting {
		r.k.remove(context.Background(), r.ns, r.name, r.uid)
		_ = os.RemoveAll(r.dir)
		r.k.forget(r.uid)
		return
	}
	r.publish()
	// An ended Pod (a Job's) stays until it is deleted.
	<-r.stopping
	r.k.remove(context.Background(), r.ns, r.name, r.uid)
	_ = os.RemoveAll(r.dir)
	r.k.forget(r.uid)
}

// prepare makes the volumes, retrying what a kubelet retries (a missing
// Secret or unbound claim) until it works or the Pod goes.
func (r *podRunner) prepare() bool {
	for {
		err := r.makeVolumes()
		if err == nil {
			return true
		}
		r.mu.Lock()
		for i := range r.main {
			r.main[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}}
		}
		r.mu.Unlock()
		r.publish()
		select {
		case <-r.stopping:
			return false
		case <-r.ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// runContainers runs the init containers one after another, then the
// containers, until the Pod is deleted or (restart policy permitting) ends.
func (r *podRunner) runContainers() {
	pod := r.current()
	for i, c := range pod.Spec.InitContainers {
		if !r.runInit(i, c) {
			return
		}
	}
	r.mu.Lock()
	r.initDone = true
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i, c := range pod.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runMain(i, c)
		}()
	}
	wg.Wait()
	r.mu.Lock()
	r.phase = corev1.PodSucceeded
	for _, s := range r.main {
		if s.State.Terminated != nil && s.State.Terminated.ExitCode != 0 {
			r.phase = corev1.PodFailed
		}
	}
	r.mu.Unlock()
}

// runInit runs an init container until it succeeds; false if the Pod
// failed or is going.
func (r *podRunner) runInit(i int, c corev1.Container) bool {
	policy := r.current().Spec.RestartPolicy
	for attempt := 0; ; attempt++ {
		code, ok := r.runOnce(c, func(s corev1.ContainerStatus) { r.setStatus(true, i, s) })
		if !ok {
			return false
		}
		if code == 0 {
			return true
		}
		if policy == corev1.RestartPolicyNever {
			r.mu.Lock()
			r.phase = corev1.PodFailed
			r.mu.Unlock()
			return false
		}
		if !r.backoff(attempt) {
			return false
		}
	}
}

// runMain runs a container as the restart policy says, until the Pod goes.
func (r *podRunner) runMain(i int, c corev1.Container) {
	policy := r.current().Spec.RestartPolicy
	for attempt := 0; ; attempt++ {
		code, ok := r.runOnce(c, func(s corev1.ContainerStatus) { r.setStatus(false, i, s) })
		if !ok {
			return
		}
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
			return
		}
		if !r.backoff(attempt) {
			return
		}
	}
}

// backoff waits before a restart as the kubelet does (doubling from a
// second, capped), marking the container CrashLoopBackOff meanwhile.
func (r *podRunner) backoff(attempt int) bool {
	d := time.Second << min(attempt, 10)
	if d > r.k.cfg.MaxBackoff {
		d = r.k.cfg.MaxBackoff
	}
	select {
	case <-r.stopping:
		return false
	case <-r.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// setStatus records a container's status and publishes the Pod's.
func (r *podRunner) setStatus(isInit bool, i int, s corev1.ContainerStatus) {
	r.mu.Lock()
	list := r.main
	if isInit {
		list = r.init
	}
	prev := list[i]
	s.RestartCount = prev.RestartCount
	if s.State.Running != nil && (prev.State.Terminated != nil) {
		s.RestartCount++
	}
	if s.State.Running != nil && prev.State.Terminated != nil {
		s.LastTerminationState = prev.State
	} else if s.LastTerminationState == (corev1.ContainerState{}) {
		s.LastTerminationState = prev.LastTerminationState
	}
	list[i] = s
	if !isInit && s.State.Running != nil {
		r.phase = corev1.PodRunning
	}
	r.mu.Unlock()
	r.publish()
}

// setReady records a container's readiness.
func (r *podRunner) setReady(name string, ready bool) {
	r.mu.Lock()
	changed := false
	for i := range r.main {
		if r.main[i].Name == name && r.main[i].Ready != ready {
			r.main[i].Ready = ready
			changed = true
		}
	}
	r.mu.Unlock()
	if changed {
		r.publish()
	}
}

// publish writes the Pod's status as this node sees it.
func (r *podRunner) publish() {
	r.mu.Lock()
	status := r.statusLocked()
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := r.k.cs.CoreV1().Pods(r.ns).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if pod.UID != r.uid {
			return nil
		}
		pod.Status = *merged(status, pod.Status)
		_, err = r.k.cs.CoreV1().Pods(r.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// merged is the node's view of a Pod's status over the one stored: the
// scheduler's condition stays, and a condition that did not change keeps
// when it last did.
func merged(status *corev1.PodStatus, stored corev1.PodStatus) *corev1.PodStatus {
	out := status.DeepCopy()
	for _, c := range stored.Conditions {
		if c.Type == corev1.PodScheduled {
			out.Conditions = append(out.Conditions, c)
		}
	}
	for i, c := range out.Conditions {
		for _, old := range stored.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				out.Conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	return out
}

func (r *podRunner) statusLocked() *corev1.PodStatus {
	containersReady := true
	for _, s := range r.main {
		if !s.Ready {
			containersReady = false
		}
	}
	ready := containersReady && r.phase == corev1.PodRunning
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: reason}
		if ok {
			c.Status, c.Reason = corev1.ConditionTrue, ""
		}
		return c
	}
	st := &corev1.PodStatus{
		Phase: r.phase, HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP: r.ip, PodIPs: []corev1.PodIP{{IP: r.ip}}, StartTime: &r.started,
		InitContainerStatuses: append([]corev1.ContainerStatus(nil), r.init...),
		ContainerStatuses:     append([]corev1.ContainerStatus(nil), r.main...),
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true, ""),
			cond(corev1.PodInitialized, r.initDone, "ContainersNotInitialized"),
			cond(corev1.ContainersReady, containersReady, "ContainersNotReady"),
			cond(corev1.PodReady, ready, "ContainersNotReady"),
		},
	}
	return st
}

func (r *podRunner) logPath(container string) string {
	return filepath.Join(r.dir, "logs", container+".log")
}

// stopProcesses stops the running processes: SIGTERM, then SIGKILL once
// the grace is over (at once when the Pod is already gone).
func (r *podRunner) stopProcesses() {
	r.mu.Lock()
	procs := make([]*process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	deadline := time.Now().Add(r.grace)
	if r.ctx.Err() != nil {
		deadline = time.Now()
	}
	for _, p := range procs {
		p.stop(deadline)
	}
}

func (r *podRunner) unmountAll() {
	r.mu.Lock()
	mounts := r.mounts
	r.mounts = nil
	r.mu.Unlock()
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unmount(mounts[i]); err != nil {
			// Never delete through a mount: keep the directory.
			r.dir = filepath.Join(os.TempDir(), "procnode-kept-"+string(r.uid))
			fmt.Fprintf(os.Stderr, "procnode: unmounting %s: %v\n", mounts[i], err)
		}
	}
}
