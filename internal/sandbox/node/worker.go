package node

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/internal/sandbox/netns"
)

// podWorker runs one Pod: one goroutine syncing it level-triggered on
// every update, every container exit or probe change, and once a second.
type podWorker struct {
	n         *Node
	uid       types.UID
	namespace string
	name      string
	dir       string // D/pods/<uid>
	logDir    string // D/logs/pods/<ns>_<name>_<uid>

	mu       sync.Mutex
	apiPod   *corev1.Pod // newest object seen (informer or our own writes)
	gone     bool        // deleted from the API
	wake     chan struct{}
	cancel   context.CancelFunc
	loopDone chan struct{}
	finished bool

	net          *netns.Pod
	podIP        string
	vols         *volumes
	volInfo      map[string]volumeInfo
	lastRefresh  time.Time
	startTime    *metav1.Time
	init         []*ctr
	ctrs         []*ctr
	released     bool // runtime resources freed after a terminal phase
	lastSyncErr  string
	pushedStatus *corev1.PodStatus
}

func newPodWorker(n *Node, pod *corev1.Pod) *podWorker {
	in := n.cfg.Instance
	w := &podWorker{
		n: n, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		dir:    in.Path("pods", string(pod.UID)),
		logDir: in.Path("logs", "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		wake:   make(chan struct{}, 1),
	}
	w.vols = newVolumes(n, w.dir)
	for i := range pod.Spec.InitContainers {
		w.init = append(w.init, newCtr(pod.Spec.InitContainers[i], true))
	}
	for i := range pod.Spec.Containers {
		w.ctrs = append(w.ctrs, newCtr(pod.Spec.Containers[i], false))
	}
	return w
}

// update records the newest API object (nil: deleted) and wakes the loop.
func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	if pod == nil {
		w.gone = true
	} else if newer(pod, w.apiPod) {
		w.apiPod = pod
	}
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// newer compares resource versions; etcd's are increasing integers.
func newer(a, b *corev1.Pod) bool {
	if b == nil {
		return true
	}
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if errA != nil || errB != nil {
		return true
	}
	return ra >= rb
}

func (w *podWorker) isFinished() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.finished
}

// startLoop (re)starts the sync goroutine; a no-op while it runs.
func (w *podWorker) startLoop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loopDone != nil || w.finished {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.cancel, w.loopDone = cancel, done
	go w.loop(ctx, done)
}

func (w *podWorker) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if w.sync(ctx) {
			w.mu.Lock()
			w.finished = true
			w.mu.Unlock()
			w.n.forget(w.uid)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
		case <-w.n.cfg.Images.Changed():
		}
	}
}

// halt stops the loop and kills every process at once (node stop).
func (w *podWorker) halt() {
	w.mu.Lock()
	cancel, done := w.cancel, w.loopDone
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	w.killAll(0)
	w.mu.Lock()
	w.cancel, w.loopDone = nil, nil
	w.mu.Unlock()
}

// sync drives the Pod one step toward its spec; it returns true once the
// Pod is gone and everything of it removed.
func (w *podWorker) sync(ctx context.Context) bool {
	w.mu.Lock()
	pod, gone, released := w.apiPod, w.gone, w.released
	w.mu.Unlock()
	if gone || (pod != nil && pod.DeletionTimestamp != nil) {
		w.terminate(ctx, pod, gone)
		return true
	}
	if pod == nil || released {
		return false
	}
	if err := w.ensureSandbox(ctx, pod); err != nil {
		w.syncError(pod, "FailedCreatePodSandBox", err)
		w.pushStatus(ctx, pod)
		return false
	}
	w.refreshVolumes(ctx, pod)
	w.runContainers(pod)
	st := w.pushStatus(ctx, pod)
	if terminalPhase(st.Phase) && !w.anyRunning() {
		w.releaseRuntime(ctx)
	}
	return false
}

// syncError records a failure once as an Event, not on every retry.
func (w *podWorker) syncError(pod *corev1.Pod, reason string, err error) {
	w.mu.Lock()
	repeat := w.lastSyncErr == err.Error()
	w.lastSyncErr = err.Error()
	w.mu.Unlock()
	if !repeat {
		w.n.recorder.Event(pod, corev1.EventTypeWarning, reason, err.Error())
	}
}

func (w *podWorker) refreshVolumes(ctx context.Context, pod *corev1.Pod) {
	w.mu.Lock()
	due := time.Since(w.lastRefresh) > 5*time.Second
	if due {
		w.lastRefresh = time.Now()
	}
	w.mu.Unlock()
	if due {
		if err := w.vols.refresh(ctx, pod); err != nil {
			w.syncError(pod, "FailedMount", err)
		}
	}
}

// terminate is graceful deletion: SIGTERM, the grace period, SIGKILL, then
// the Pod's network and mounts go, and the API object is deleted with grace
// period 0 and a UID precondition.
func (w *podWorker) terminate(ctx context.Context, pod *corev1.Pod, gone bool) {
	w.killAll(gracePeriod(pod, gone))
	w.teardown(ctx)
	if !gone && pod != nil {
		w.n.deletePod(ctx, pod)
	}
}

// gracePeriod is the deletion's grace period; a Pod already removed from the
// API (force deletion) gets at most 2 s, the kubelet's minimum.
func gracePeriod(pod *corev1.Pod, gone bool) time.Duration {
	secs := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod != nil && pod.DeletionGracePeriodSeconds != nil {
		secs = *pod.DeletionGracePeriodSeconds
	} else if pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil {
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	if gone || pod == nil {
		secs = min(secs, 2)
	}
	return time.Duration(secs) * time.Second
}

// releaseRuntime frees the network and memory of a Pod that reached
// Succeeded or Failed; its status stays in the API.
func (w *podWorker) releaseRuntime(ctx context.Context) {
	w.mu.Lock()
	w.released = true
	w.mu.Unlock()
	w.removeRuntime(ctx)
}

// teardown removes every trace of the Pod from the host.
func (w *podWorker) teardown(ctx context.Context) {
	w.killAll(0)
	w.removeRuntime(ctx)
	for _, d := range []string{w.dir, w.logDir} {
		if err := os.RemoveAll(d); err != nil {
			slog.Warn("Removing a Pod directory failed", "dir", d, "err", err)
		}
	}
}

func (w *podWorker) removeRuntime(ctx context.Context) {
	w.n.cfg.Hosts.Unregister(w.uid)
	w.mu.Lock()
	pn := w.net
	w.net = nil
	w.mu.Unlock()
	if pn != nil {
		killNetnsProcesses(pn.Netns)
		if err := netns.Teardown(ctx, *pn); err != nil {
			slog.Warn("Removing a Pod network failed; `sandbox down` removes it", "pod", w.namespace+"/"+w.name, "err", err)
		}
		w.n.release(w.uid)
	}
	if err := w.vols.teardown(); err != nil {
		slog.Warn("Unmounting a Pod's tmpfs failed; `sandbox down` removes it", "pod", w.namespace+"/"+w.name, "err", err)
	}
}

// pushStatus writes the Pod's status when it differs from the API's.
func (w *podWorker) pushStatus(ctx context.Context, pod *corev1.Pod) corev1.PodStatus {
	for attempt := 0; ; attempt++ {
		st := buildPodStatus(w.view(pod))
		w.mu.Lock()
		same := equality.Semantic.DeepEqual(pod.Status, st) ||
			(w.pushedStatus != nil && equality.Semantic.DeepEqual(*w.pushedStatus, st) && attempt == 0)
		w.mu.Unlock()
		if same {
			return st
		}
		cp := pod.DeepCopy()
		cp.Status = st
		updated, err := w.n.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		if err == nil {
			w.mu.Lock()
			w.pushedStatus = &st
			w.mu.Unlock()
			w.update(updated)
			return st
		}
		if !apierrors.IsConflict(err) || attempt > 2 {
			if !apierrors.IsNotFound(err) {
				slog.Warn("Updating Pod status failed; retrying on the next sync", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
			return st
		}
		fresh, gerr := w.n.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil || fresh.UID != w.uid {
			return st
		}
		w.update(fresh)
		pod = fresh
	}
}

// view snapshots the worker's state for buildPodStatus.
func (w *podWorker) view(pod *corev1.Pod) podView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := podView{
		Pod: pod, SandboxReady: w.net != nil, PodIP: w.podIP, StartTime: w.startTime, Now: metav1.Now(),
		HostIP: w.n.cfg.Instance.BridgeIP().String(),
	}
	if w.podIP == "" {
		v.PodIP = pod.Status.PodIP
	}
	for _, c := range w.init {
		v.Init = append(v.Init, c.view(w.uid, true))
	}
	for _, c := range w.ctrs {
		v.Containers = append(v.Containers, c.view(w.uid, false))
	}
	return v
}

func (w *podWorker) anyRunning() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range append(append([]*ctr{}, w.init...), w.ctrs...) {
		if c.proc != nil {
			return true
		}
	}
	return false
}

func (w *podWorker) containerDir(name string) string {
	return filepath.Join(w.dir, "containers", name)
}
