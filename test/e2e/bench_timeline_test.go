//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The steps of a member's timeline, in the order they usually happen: a
// member that joins, then one that leaves (removed from etcd, its Pod's
// deletion asked, its etcd container stopped, the Pod gone from the API).
// The table prints the steps some member reached.
var timelineSteps = []string{"created", "pod", "pvc bound", "scheduled", "added", "started", "ready", "promoted",
	"removed", "deleting", "stopped", "pod gone"}

// timeline records, from watches, when each member of one cluster reached
// each step: the operator's Events (member created, added to etcd as a
// learner, promoted), its Pod (created, scheduled, container started,
// Ready) and its claim (bound). Times are when the watch saw them, which
// the API server's one-second timestamps would blur.
type timeline struct {
	cluster string
	start   time.Time
	mu      sync.Mutex
	at      map[string]map[string]time.Duration
	// said is what the cluster's Progressing condition said, each message
	// with when it first did: what the operator waited on.
	said  []string
	last  map[string]bool
	stops []func()
	// fetched are the restarts whose previous log was asked for.
	fetched map[string]bool
}

// watchTimeline starts recording the cluster's timeline. Its zero, start,
// is when its watches are open: the scenario's clock starts there, so
// that opening them (six calls to the API server) is not counted as the
// operator's time, as nothing is in the floors'.
func watchTimeline(t *testing.T, ns, cluster string) *timeline {
	tl := &timeline{cluster: cluster, at: map[string]map[string]time.Duration{}}
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: manifest.LabelCluster + "=" + cluster}
	var watches []watch.Interface
	// Each watch starts at its list's resourceVersion: what existed before
	// the scenario is not replayed as if it happened in it.
	for _, open := range []func() (watch.Interface, error){
		func() (watch.Interface, error) {
			l, err := cs.CoreV1().Pods(ns).List(ctx, selector)
			if err != nil {
				return nil, err
			}
			return cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector.LabelSelector, ResourceVersion: l.ResourceVersion})
		},
		func() (watch.Interface, error) {
			l, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return cs.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		func() (watch.Interface, error) {
			l, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + cluster})
			if err != nil {
				return nil, err
			}
			return cs.EventsV1().Events(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + cluster, ResourceVersion: l.ResourceVersion})
		},
	} {
		w, err := open()
		if err != nil {
			t.Fatal(err)
		}
		tl.stops = append(tl.stops, w.Stop)
		watches = append(watches, w)
	}
	tl.start = time.Now()
	for _, w := range watches {
		go func() {
			for ev := range w.ResultChan() {
				tl.see(ev.Type, ev.Object)
			}
		}()
	}
	// The cluster's condition is polled as often as the scenarios poll.
	done := make(chan struct{})
	tl.stops = append(tl.stops, func() { close(done) })
	go func() {
		for {
			tl.readConditions(ns)
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return tl
}

// readConditions records what the cluster's Progressing condition says,
// and each member's own account while it is not Ready (a member whose etcd
// did not answer the operator yet, say).
func (tl *timeline) readConditions(ns string) {
	ctx := context.Background()
	c := &v1alpha2.EtcdCluster{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: tl.cluster}, c); err == nil {
		if p := conditions.Get(c.Status.Conditions, conditions.Progressing); p != nil {
			tl.progress(p.Message)
		}
	}
	ms := &v1alpha2.EtcdMemberList{}
	if err := k.List(ctx, ms, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: tl.cluster}); err != nil {
		return
	}
	for _, m := range ms.Items {
		if r := conditions.Get(m.Status.Conditions, conditions.Ready); r != nil && r.Status != metav1.ConditionTrue {
			tl.progress(fmt.Sprintf("[%s] %s: %s", m.Name, r.Reason, r.Message))
		}
	}
}

// mark records the first time member reached step.
func (tl *timeline) mark(member, step string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.at[member] == nil {
		tl.at[member] = map[string]time.Duration{}
	}
	if _, ok := tl.at[member][step]; !ok {
		tl.at[member][step] = time.Since(tl.start)
	}
}

// between is how long member took from one step to another.
func (tl *timeline) between(member, from, to string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	a, okA := tl.at[member][from]
	b, okB := tl.at[member][to]
	return b - a, okA && okB
}

// progress records a message the first time it is seen.
func (tl *timeline) progress(msg string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	line := fmt.Sprintf("%6.2f  %s", time.Since(tl.start).Seconds(), msg)
	if tl.last[msg] {
		return
	}
	if tl.last == nil {
		tl.last = map[string]bool{}
	}
	tl.last[msg] = true
	tl.said = append(tl.said, line)
}

func (tl *timeline) see(kind watch.EventType, obj any) {
	switch o := obj.(type) {
	case *corev1.Pod:
		tl.seePod(kind, o)
	case *corev1.PersistentVolumeClaim:
		if member, ok := strings.CutPrefix(o.Name, manifest.PVCName("")); ok && strings.HasPrefix(member, tl.cluster+"-") && o.Status.Phase == corev1.ClaimBound {
			tl.mark(member, "pvc bound")
		}
	case *eventsv1.Event:
		step := map[string]string{"MemberCreated": "created", "MemberAdded": "added", "MemberPromoted": "promoted", "MemberRemoved": "removed"}[o.Reason]
		if step == "" {
			return
		}
		for _, word := range strings.Fields(o.Note) {
			if strings.HasPrefix(word, tl.cluster+"-") {
				tl.mark(word, step)
				return
			}
		}
	}
}

// seePod records the steps a member's Pod shows.
func (tl *timeline) seePod(kind watch.EventType, o *corev1.Pod) {
	if kind == watch.Deleted {
		tl.mark(o.Name, "pod gone")
		return
	}
	tl.mark(o.Name, "pod")
	if o.DeletionTimestamp != nil {
		tl.mark(o.Name, "deleting")
	}
	for _, c := range o.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			tl.mark(o.Name, "scheduled")
		}
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			tl.mark(o.Name, "ready")
		}
	}
	for _, s := range o.Status.ContainerStatuses {
		if s.Name == manifest.EtcdContainer && s.State.Running != nil {
			tl.mark(o.Name, "started")
		}
		if s.Name == manifest.EtcdContainer && s.State.Terminated != nil {
			tl.mark(o.Name, "stopped")
		}
		if last := s.LastTerminationState.Terminated; s.Name == manifest.EtcdContainer && last != nil {
			// A restart costs a kubelet back-off; say why it came.
			tl.progress(fmt.Sprintf("[%s] etcd restarted (%d so far), its last run ended with exit code %d: %s",
				o.Name, s.RestartCount, last.ExitCode, lastLogLine(last.Message)))
			tl.previousLog(o, s.RestartCount)
		}
	}
}

// stop ends the watches and prints the table: one row per member, the
// seconds since the zero at which it reached each step.
func (tl *timeline) stop(t *testing.T, what string) {
	for _, s := range tl.stops {
		s()
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	members := make([]string, 0, len(tl.at))
	for m := range tl.at {
		members = append(members, m)
	}
	first := func(m string) time.Duration {
		d := time.Duration(1 << 62)
		for _, at := range tl.at[m] {
			d = min(d, at)
		}
		return d
	}
	slices.SortFunc(members, func(a, b string) int { return int(first(a) - first(b)) })
	var steps []string
	for _, s := range timelineSteps {
		for _, m := range members {
			if _, ok := tl.at[m][s]; ok {
				steps = append(steps, s)
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "timeline of %s (seconds since the scenario began):\n  %-18s", what, "member")
	for _, s := range steps {
		fmt.Fprintf(&b, " %9s", s)
	}
	b.WriteString("\n")
	for _, m := range members {
		fmt.Fprintf(&b, "  %-18s", m)
		for _, s := range steps {
			if at, ok := tl.at[m][s]; ok {
				fmt.Fprintf(&b, " %9.2f", at.Seconds())
			} else {
				fmt.Fprintf(&b, " %9s", "-")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("  the operator's Progressing condition said:\n")
	for _, l := range tl.said {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Print(b.String())
}

// previousLog adds, once per restart, the warnings and errors of the
// etcd run that ended, from its whole log: the termination message holds
// only its tail, which often misses the underlying error (such as why a
// joiner could not fetch the cluster's membership).
func (tl *timeline) previousLog(o *corev1.Pod, restarts int32) {
	key := fmt.Sprintf("%s/%s#%d", o.Namespace, o.Name, restarts)
	tl.mu.Lock()
	if tl.fetched == nil {
		tl.fetched = map[string]bool{}
	}
	seen := tl.fetched[key]
	tl.fetched[key] = true
	tl.mu.Unlock()
	if seen {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := cs.CoreV1().Pods(o.Namespace).GetLogs(o.Name, &corev1.PodLogOptions{Container: manifest.EtcdContainer, Previous: true}).DoRaw(ctx)
		if err != nil {
			tl.progress(fmt.Sprintf("[%s] the log of etcd's run before restart %d: %v", o.Name, restarts, err))
			return
		}
		tl.progress(fmt.Sprintf("[%s] the log of etcd's run before restart %d: %s", o.Name, restarts, lastLogLine(string(raw))))
	}()
}

// lastLogLine is how etcd's last run ended, from its termination message
// (the tail of its log, when it failed): the message and error of its last
// line, then of each warning or error before it (once each), when they are
// etcd's JSON lines, cut short.
func lastLogLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	type entry struct{ Level, Msg, Error string }
	parse := func(line string) (entry, bool) {
		var e entry
		return e, json.Unmarshal([]byte(line), &e) == nil && e.Msg != ""
	}
	say := func(e entry) string { return strings.TrimSuffix(e.Msg+": "+e.Error, ": ") }
	last, ok := parse(lines[len(lines)-1])
	out := lines[len(lines)-1]
	if ok {
		out = say(last)
		seen := map[string]bool{out: true}
		var before []string
		for _, line := range lines[:len(lines)-1] {
			if e, ok := parse(line); ok && (e.Level == "warn" || e.Level == "error") && !seen[say(e)] {
				seen[say(e)] = true
				before = append(before, say(e))
			}
		}
		if len(before) > 0 {
			out += " (after: " + strings.Join(before, "; ") + ")"
		}
	}
	if len(out) > 600 {
		out = out[:600] + "…"
	}
	return out
}
