package member

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/dataguard"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Timers. Each waits for something no watch reports, but retrySecrets.
const (
	// retrySecrets: a member waiting for a Secret is woken by the watch on
	// the Secrets' metadata when it appears; this is the backstop.
	retrySecrets = 30 * time.Second
	// retryStatus: etcd did not answer the Status call of a Ready Pod.
	retryStatus = 2 * time.Second
	// statusTimeout bounds that call. A Pod whose etcd has not answered
	// yet (a member that just started: etcd serves clients only once it
	// has published itself through raft) is asked with a shorter bound and
	// again sooner: the bench's timelines showed a first call to a new
	// learner taking its whole timeout while the next one was answered at
	// once. A member that did not answer its last call either gets
	// silentTimeout: etcd answers a Status call from memory in
	// milliseconds, and each call to a silent member holds a worker.
	statusTimeout, discoverTimeout, retryDiscover, silentTimeout = 5 * time.Second, 2 * time.Second, time.Second, time.Second
	// maxRetryStatus bounds how far apart the Status calls of a member
	// that keeps not answering are (backOff), and quickFor how long one
	// that never answered is asked at the quick pace. Each call to a
	// silent member holds a worker for its timeout, which other members
	// wait for (a hundred silent members asked every 2 s would keep every
	// worker busy). A member that answers again is
	// seen at once if its Pod's readiness changes (watched), within
	// maxRetryStatus otherwise.
	maxRetryStatus, quickFor = 30 * time.Second, 20 * time.Second
	// nodeLostAfter: how long a member's node may be NotReady, or its Pod stuck
	// terminating, before the member counts as lost and gets replaced.
	nodeLostAfter = 30 * time.Second
)

// lostDataSignatures are what etcd says, in the last lines before it exits,
// when the member's data directory no longer matches the cluster: the raft
// log is gone or behind what the cluster committed, or the member was
// removed. A member that formed (it has a member ID) only ever bootstraps from
// its peers when its write-ahead log is gone, so a failed bootstrap from peers
// is a lost data directory too. Such a member can never come back as itself.
var lostDataSignatures = []string{
	"raft log corrupted, truncated, or lost",
	"has already been bootstrapped",
	"the member has been permanently removed from the cluster",
	"member count is unequal",
	"cannot fetch cluster info from peer urls",
	"could not retrieve cluster information from the given URLs",
	// The data guard (package dataguard) refused to start etcd without the
	// member's write-ahead log, or on a log or backend etcd cannot start on.
	dataguard.Refusal,
	dataguard.RefusalDamaged,
}

// podLost marks a tmpfs member whose Pod is gone: its data went with the Pod,
// and starting a new Pod on an empty data directory would be a bootstrap in
// disguise.
func podLost(s *state) bool {
	m := s.member
	if m.Spec.Storage.Medium != v1alpha2.StorageMediumMemory || m.Status.PodUID == "" {
		return false
	}
	if s.pod != nil && string(s.pod.UID) == m.Status.PodUID {
		return false
	}
	set(s, conditions.Lost, true, conditions.ReasonPodLost, "The pod of this memory-backed member is gone, and its data with it")
	set(s, conditions.Ready, false, conditions.ReasonPodLost, "The pod is gone; the member will be replaced")
	m.Status.Replicas = 0
	return true
}

// observe reports on a running Pod: readiness, etcd's member ID, voter or
// learner, version, and whether the member is lost.
func (r *Reconciler) observe(ctx context.Context, s *state) (ctrl.Result, error) {
	pod, st := s.pod, &s.member.Status
	st.PodName = pod.Name
	if st.PodUID != string(pod.UID) {
		st.PodUID, st.Version = string(pod.UID), ""
	}
	st.Replicas = 1
	st.Selector = manifest.MemberSelectorString(s.member.Spec.ClusterName, s.member.Name)
	requeue := r.checkLost(ctx, s)
	if !podReady(pod) {
		if !r.reportRestore(s) {
			set(s, conditions.Ready, false, conditions.ReasonPodNotReady, podProblem(pod))
		}
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	if s.member.DeletionTimestamp != nil {
		// Leaving: the cluster controller removes it from etcd (reading
		// etcd's view itself), then deletes its Pod. A status call that
		// reaches its etcd after the removal panics etcd 3.6 ("failed to
		// find local ID in cluster members"), and a kubelet that sees that
		// crash before the Pod's deletion starts etcd again.
		set(s, conditions.Ready, true, conditions.ReasonPodReady, "The pod is ready; the member is leaving, and its etcd is no longer asked")
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	silent := r.silences.silentBefore(s.pod.UID, s.now)
	err := r.readStatus(ctx, s, silent > 0)
	r.silences.note(s.pod.UID, !etcd.Silent(err), s.now)
	if err != nil {
		reason, msg := conditions.ReasonDiscoveringMemberID, "The pod is ready but etcd did not answer: "+err.Error()
		switch {
		case errors.Is(err, etcd.ErrAuthRequired) && !manifest.AuthWanted(s.cluster):
			// A cluster restored from a snapshot of one with auth, or
			// given users by hand.
			reason, msg = conditions.ReasonAuthRequiredNotConfigured, "etcd asks for credentials and spec.auth gives none: "+err.Error()
		case errors.Is(err, etcd.ErrAuthFailed) && !errors.Is(err, etcd.ErrAuthTokenInvalid):
			// (A token is invalid for a moment on a learner that has not
			// applied the login yet.)
			reason, msg = conditions.ReasonAuthCredentialsRejected, "etcd refuses the root credentials the operator has: "+err.Error()
		}
		set(s, conditions.Ready, false, reason, msg)
		if s.member.Status.Version == "" && reason == conditions.ReasonDiscoveringMemberID {
			// A Pod whose etcd has not answered yet; one that refuses
			// the credentials is asked at the usual pace.
			return ctrl.Result{RequeueAfter: backOff(retryDiscover, silent, false)}, nil
		}
		return ctrl.Result{RequeueAfter: backOff(retryStatus, silent, s.member.Status.Version != "")}, nil
	}
	set(s, conditions.Ready, true, conditions.ReasonPodReady, "etcd is serving")
	setVersionDrift(s)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// silences remembers since when each Pod's etcd has not answered its Status
// calls, in memory: it only paces the calls, and an operator that restarts
// starts with quick ones again. Keyed by Pod UID, so a new Pod (a member
// that just started) is asked at the quick pace whatever its predecessor
// did.
type silences struct {
	mu   sync.Mutex
	byID map[types.UID]silence
}

type silence struct{ since, last time.Time }

// note records the outcome of a call to the Pod's etcd at now.
func (ss *silences) note(pod types.UID, answered bool, now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	prev, was := ss.byID[pod]
	switch {
	case answered:
		delete(ss.byID, pod)
	case was:
		ss.byID[pod] = silence{since: prev.since, last: now}
	default:
		if ss.byID == nil {
			ss.byID = map[types.UID]silence{}
		}
		ss.byID[pod] = silence{since: now, last: now}
	}
	for id, s := range ss.byID {
		// A Pod not asked for this long is gone (a silent one is asked
		// at least every maxRetryStatus).
		if now.Sub(s.last) > 10*maxRetryStatus {
			delete(ss.byID, id)
		}
	}
}

// silentBefore is how long the Pod's etcd had been silent before now.
func (ss *silences) silentBefore(pod types.UID, now time.Time) time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s, ok := ss.byID[pod]; ok {
		return max(now.Sub(s.since), time.Nanosecond)
	}
	return 0
}

// backOff is when to ask a member that did not answer again. A Pod whose
// etcd never answered (a member that just started serves within seconds,
// and is waited for) is asked at the base pace for its first quickFor of
// silence; after that, and at once for a member that answered before, the
// wait is as long as the silence so far: the calls come at about 2, 4, 8,
// 16 s, then every maxRetryStatus.
func backOff(base, silent time.Duration, answeredBefore bool) time.Duration {
	if !answeredBefore && silent < quickFor {
		return base
	}
	return min(max(base, silent), maxRetryStatus)
}

// readStatus asks the member's own etcd about itself. A member that did
// not answer the last call either (again) is given the shorter bound.
func (r *Reconciler) readStatus(ctx context.Context, s *state, again bool) error {
	m := s.member
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, s.cluster, []*v1alpha2.EtcdMember{m})
	if err != nil {
		return err
	}
	c, err := r.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	timeout := statusTimeout
	switch {
	case again:
		timeout = silentTimeout
	case m.Status.Version == "":
		timeout = discoverTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	es, err := c.Status(rctx, manifest.ClientURL(m))
	if err != nil {
		return err
	}
	id := etcd.FormatID(es.MemberID)
	if cid := s.cluster.Status.ClusterID; cid != "" && etcd.FormatID(es.ClusterID) != cid {
		markLost(s, conditions.ReasonDataDirLost, fmt.Sprintf("etcd runs in cluster %s, not in %s", etcd.FormatID(es.ClusterID), cid))
	}
	if m.Status.MemberID != "" && m.Status.MemberID != id {
		markLost(s, conditions.ReasonDataDirLost, fmt.Sprintf("etcd now reports member ID %s instead of %s", id, m.Status.MemberID))
		return nil
	}
	if m.Status.MemberID == "" {
		r.event(m, false, "MemberDiscovered", "Discover", "etcd member ID is %s", id)
	}
	m.Status.MemberID, m.Status.IsVoter, m.Status.Version = id, !es.IsLearner, es.Version
	return nil
}

func setVersionDrift(s *state) {
	m := s.member
	if m.Status.Version == "" || m.Spec.Version == "" {
		return
	}
	if m.Status.Version == m.Spec.Version {
		set(s, conditions.VersionDrifted, false, conditions.ReasonVersionMatched, "etcd runs version "+m.Status.Version)
		return
	}
	set(s, conditions.VersionDrifted, true, conditions.ReasonVersionMismatch,
		fmt.Sprintf("etcd runs version %s, the member asks for %s", m.Status.Version, m.Spec.Version))
}

// checkLost decides whether the member can still come back as itself, and
// returns when to look again if a timer is running.
func (r *Reconciler) checkLost(ctx context.Context, s *state) time.Duration {
	if s.member.Status.MemberID != "" {
		if msg := lostDataMessage(s.pod); msg != "" {
			markLost(s, conditions.ReasonDataDirLost, "etcd exited because its data no longer matches the cluster: "+msg)
			return 0
		}
		if msg := crashLoopMessage(s.pod); msg != "" {
			r.markCrashLooping(s, msg)
			return 0
		}
	}
	lostAt, why := r.nodeLostAt(ctx, s.pod)
	if lostAt.IsZero() {
		set(s, conditions.Lost, false, conditions.ReasonNotLost, "The member can run as itself")
		return 0
	}
	if !s.now.Before(lostAt) {
		markLost(s, conditions.ReasonNodeLost, why)
		return 0
	}
	set(s, conditions.Lost, false, conditions.ReasonNotLost, why+"; not given up yet")
	return lostAt.Sub(s.now)
}

// markCrashLooping marks a member whose etcd keeps failing to start (see
// crashLoopMessage) lost, with an Event the first time.
func (r *Reconciler) markCrashLooping(s *state, msg string) {
	if !conditions.IsTrue(s.member.Status.Conditions, conditions.Lost) {
		r.event(s.member, true, conditions.ReasonDataDirLost, "MarkLost", "%s; the member will be replaced when quorum allows", msg)
	}
	markLost(s, conditions.ReasonDataDirLost, msg)
}

func markLost(s *state, reason, message string) {
	set(s, conditions.Lost, true, reason, message+"; the member will be replaced when quorum allows")
}

// nodeLostAt returns when the member counts as lost because of its node (its
// node NotReady, or its Pod stuck terminating), or zero if it does not.
func (r *Reconciler) nodeLostAt(ctx context.Context, pod *corev1.Pod) (time.Time, string) {
	if pod.DeletionTimestamp != nil {
		return pod.DeletionTimestamp.Add(nodeLostAfter), "the pod is stuck terminating, its node is not confirming"
	}
	if pod.Spec.NodeName == "" {
		return time.Time{}, ""
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		return time.Time{}, ""
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return c.LastTransitionTime.Add(nodeLostAfter), fmt.Sprintf("node %s is not ready (%s)", node.Name, c.Reason)
		}
	}
	return time.Time{}, ""
}

// lostDataMessage returns the line etcd exited with if it says the data dir
// no longer matches the cluster. Only a container that is not running now
// counts, and only its latest end: the current one if it has ended, else
// (waiting to start again) the last. An earlier end is history: a joiner
// whose first start could not reach its peers ends with "cannot fetch
// cluster info", comes up on the next start, and when a roll-out later
// stops it the kubelet reports that stop as the current end and still
// shows the first one as the last (the bench's rolling upgrade replaced
// such a member). Nor does a Pod being deleted count: the operator, a drain
// or the user stopped it, and its successor says what its data is.
func lostDataMessage(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return ""
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != manifest.EtcdContainer || cs.State.Running != nil {
			continue
		}
		t := cs.State.Terminated
		if t == nil {
			t = cs.LastTerminationState.Terminated
		}
		if t == nil {
			continue
		}
		for _, sig := range lostDataSignatures {
			if strings.Contains(t.Message, sig) {
				return sig
			}
		}
	}
	return ""
}

func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podProblem says in one line why a Pod is not ready.
func podProblem(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "The pod is terminating"
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == manifest.JoinGateContainer && cs.State.Running != nil {
			return "The pod waits until the member is added to etcd"
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("Container %s is waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("The pod cannot be scheduled: %s", c.Message)
		}
	}
	return fmt.Sprintf("The pod is %s and not ready yet", pod.Status.Phase)
}
