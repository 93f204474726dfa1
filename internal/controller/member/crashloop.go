package member

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// A member whose etcd keeps failing to start is lost even when etcd's last
// words are none the operator knows (lostDataSignatures) and the data
// guard found nothing wrong: a backend damaged deeper than the guard looks,
// a disk that fails its reads. Left alone, it would crash-loop for good.
//
// What counts is failed starts in a row, since etcd was last seen ready in
// this Pod: the container's restart count now, less its count when the
// member controller last saw it ready (recorded on the Pod, see
// annotationReadyRestarts). A member that comes up between its failures
// never reaches the limit, however often it restarts over its life. And
// only a container that is down now after etcd failed by itself counts: an
// exit code from 1 to 127, not one from a signal (the liveness probe, a
// drain, a node's reboot end it with one), not 0 (a member removed from the
// cluster stops so), not an OOM kill (the replacement would need as much
// memory). etcd does not exit for want of a quorum: a member of a cluster
// that lost it keeps running unready, and its restart count stays.
//
// The same limit replaces a member that cannot start for reasons not in its
// data (a certificate that does not match its key, say): its replacement
// then cannot start either and is given up at its progress deadline,
// while the cluster keeps its quorum, since the cluster controller removes
// a lost member only when the members healthy without it make one.

// crashLoopRestarts is how many failed starts in a row, without etcd
// becoming ready, make a member lost. With the kubelet's back-off (10 s,
// doubling) that is about five minutes after the first failure.
const crashLoopRestarts = 5

// annotationReadyRestarts records on a Pod the etcd container's restart
// count when the member controller last saw it ready; absent means none
// (the Pod's first start). It is written only when a restarted container
// comes up, so a steady member's Pod is never written for it.
const annotationReadyRestarts = manifest.Prefix + "ready-restarts"

// etcdContainerStatus returns the Pod's etcd container status, or nil.
func etcdContainerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == manifest.EtcdContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// readyRestarts is the restart count the Pod records as last seen ready.
func readyRestarts(pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(pod.Annotations[annotationReadyRestarts], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// readyRestartsToRecord returns the value annotationReadyRestarts should
// have on the Pod now: the container's restart count once it is ready
// after a restart, else what is recorded ("" when nothing is).
func readyRestartsToRecord(pod *corev1.Pod) string {
	have := pod.Annotations[annotationReadyRestarts]
	cs := etcdContainerStatus(pod)
	if cs == nil || !cs.Ready || cs.State.Running == nil || cs.RestartCount <= readyRestarts(pod) {
		return have
	}
	return strconv.Itoa(int(cs.RestartCount))
}

// crashLoopMessage says why the member's etcd is crash-looping, or "" when
// it is not (see the rule above).
func crashLoopMessage(pod *corev1.Pod) string {
	cs := etcdContainerStatus(pod)
	if pod.DeletionTimestamp != nil || cs == nil || cs.State.Running != nil {
		return ""
	}
	t := cs.State.Terminated
	if t == nil {
		t = cs.LastTerminationState.Terminated
	}
	if t == nil || !failedByItself(t) {
		return ""
	}
	failed := cs.RestartCount - readyRestarts(pod)
	if failed < crashLoopRestarts {
		return ""
	}
	return fmt.Sprintf("etcd failed to start %d times in a row without becoming ready (the limit is %d); it last exited with code %d: %s",
		failed, crashLoopRestarts, t.ExitCode, lastWords(t))
}

// failedByItself: etcd (or the data guard before it) exited with an error
// code of its own, not by a signal, and not killed for memory.
func failedByItself(t *corev1.ContainerStateTerminated) bool {
	return t.ExitCode > 0 && t.ExitCode < 128 && t.Reason != "OOMKilled"
}

// lastWordsMax bounds the part of the termination message quoted in the
// member's status.
const lastWordsMax = 300

// lastWords picks the line of a termination message (etcd's last log
// lines) that says why etcd stopped: its fatal or panic log entry, else
// Go's "panic:" or "fatal error:" line (a stack trace follows them, whose
// last line says nothing), else the last line; shortened. Without a
// message, the kubelet's reason.
func lastWords(t *corev1.ContainerStateTerminated) string {
	lines := strings.Split(strings.TrimSpace(t.Message), "\n")
	pick := ""
	for _, prefer := range []func(string) bool{
		func(l string) bool {
			return strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"panic"`)
		},
		func(l string) bool { return strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") },
		func(l string) bool { return l != "" },
	} {
		for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
			if l := strings.TrimSpace(lines[i]); prefer(l) {
				pick = l
			}
		}
	}
	switch {
	case pick == "" && t.Reason != "":
		return t.Reason + " (no message)"
	case pick == "":
		return "no message"
	case len(pick) > lastWordsMax:
		cut := lastWordsMax
		for cut > 0 && !utf8.RuneStart(pick[cut]) {
			cut--
		}
		return pick[:cut] + "…"
	}
	return pick
}
