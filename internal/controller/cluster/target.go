package cluster

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// The locking pattern: the operator works towards status.observed, a copy of
// the spec taken at a boundary (first sight, target reached, or deadline
// expired). A spec edit in the middle of a scale waits for the boundary.
// Whatever is latched is written before anything acts on it: the latch ends
// the pass, and the status write brings the next one.

// latchFirstTarget latches the token and the first target on first sight.
func (pl *planner) latchFirstTarget() bool {
	st := pl.w.cluster.Status
	if st.ClusterToken != "" && st.Observed != nil {
		return false
	}
	next := st.DeepCopy()
	if next.ClusterToken == "" {
		next.ClusterToken = manifest.ClusterToken(pl.w.cluster)
	}
	if next.Observed != nil {
		return pl.choose(&change{kind: latchStatus, status: next})
	}
	return pl.adopt(next, conditions.ReasonInitialSnapshot, "Latched the first target")
}

// adopt copies the spec into the target and starts a new deadline; a change
// spec.snapshotBefore guards waits for its snapshot first (the planner goes
// on with the target already latched meanwhile).
func (pl *planner) adopt(next *v1alpha2.EtcdClusterStatus, reason, message string) bool {
	w := pl.w
	if pl.snapshotFirst() {
		return pl.p.change != nil
	}
	next.Observed = manifest.Observe(&w.cluster.Spec)
	deadline := metav1.NewTime(w.now.Add(time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second))
	next.ProgressDeadline = &deadline
	msg := fmt.Sprintf("%s: %d members of etcd %s", message, next.Observed.Replicas, next.Observed.Version)
	// Progressing comes from this, through report, with the latch.
	pl.working(reason, "%s", msg)
	return pl.choose(&change{kind: latchStatus, status: next, reason: reason, message: msg})
}

func progressDeadlineSeconds(s *v1alpha2.EtcdClusterSpec) int32 {
	if s.ProgressDeadlineSeconds == nil {
		return 600
	}
	return *s.ProgressDeadlineSeconds
}

// specChanged reports whether the spec asks for something the target lacks.
func specChanged(w *world) bool {
	return !equality.Semantic.DeepEqual(manifest.Observe(&w.cluster.Spec), w.cluster.Status.Observed)
}

// latchChangedTarget adopts a changed spec at a boundary: the target
// reached, a refused version (nothing was touched for it), or the deadline
// passed. Reaching the target clears the deadline.
func (pl *planner) latchChangedTarget() bool {
	w := pl.w
	st := w.cluster.Status
	switch {
	case targetReached(w) && specChanged(w):
		next := st.DeepCopy()
		next.ProgressDeadline = nil
		return pl.adopt(next, conditions.ReasonSpecChanged, "Adopted the changed spec")
	case targetReached(w) && st.ProgressDeadline != nil:
		next := st.DeepCopy()
		next.ProgressDeadline = nil
		return pl.choose(&change{kind: latchStatus, status: next})
	case targetReached(w):
		return false
	case st.ProgressDeadline == nil && specChanged(w):
		// The last target was reached and nothing is in flight: a member
		// that turned unhealthy since (keeping the target from counting as
		// reached) must not keep a new spec, perhaps the fix, from being
		// adopted.
		return pl.adopt(st.DeepCopy(), conditions.ReasonSpecChanged, "Adopted the changed spec")
	case paused(w) && specChanged(w):
		// Nothing runs, so nothing is in flight: a member deleted while
		// paused (which keeps the target from being reached) waits for
		// the resume this adopts.
		return pl.adopt(st.DeepCopy(), conditions.ReasonSpecChanged, "Adopted the changed spec of the paused cluster")
	case hasReason(w, conditions.Progressing, conditions.ReasonVersionChangeRefused) && specChanged(w):
		return pl.adopt(st.DeepCopy(), conditions.ReasonSpecChanged, "The previous target's version was refused; adopted the changed spec")
	case overdue(w) && specChanged(w):
		return pl.adopt(st.DeepCopy(), conditions.ReasonRetryAfterDeadline, "The deadline of the previous target expired; adopted the changed spec")
	}
	return false
}

// targetReached: the latched number of members run, the cluster formed
// (unless paused from the start), every running member is healthy by etcd's
// fresh report, a voter and up to date, no member is lost or leaving, and
// etcd's cluster version is the target's minor.
func targetReached(w *world) bool {
	running := w.running()
	if w.cluster.Status.Observed == nil || len(running) != w.desired() || len(w.leaving()) > 0 {
		return false
	}
	if w.desired() > 0 && w.cluster.Status.ClusterID == "" {
		return false
	}
	for _, m := range running {
		if !w.healthy(m) || !w.isVoter(m) || m.Spec.InitialCluster == "" || !w.upToDate(m) {
			return false
		}
	}
	return w.desired() == 0 || w.clusterVersion() == minorOf(w.cluster.Status.Observed.Version)
}

// minorOf turns "3.6.16" into "3.6".
func minorOf(v string) string {
	if p, err := version.Parse(v); err == nil {
		return p.MinorString()
	}
	return v
}

// overdue reports whether the latched target missed its deadline. That is a
// report (Progressing=False) and lets a changed spec be adopted at once; it
// stops no work: members are still repaired, joined and promoted, and
// reaching the target later clears it.
func overdue(w *world) bool {
	d := w.cluster.Status.ProgressDeadline
	return d != nil && !w.now.Before(d.Time)
}

// deadlineReport is the Progressing reason and message of a missed deadline.
func deadlineReport(w *world) (string, string) {
	secs := progressDeadlineSeconds(&w.cluster.Spec)
	if w.cluster.Status.ClusterID == "" {
		return conditions.ReasonBootstrapFailed, fmt.Sprintf("the cluster did not form within %ds; it is still adopted if the seed member forms it, "+
			"else delete and recreate the EtcdCluster after fixing what blocks the seed", secs)
	}
	return conditions.ReasonDeadlineExceeded, fmt.Sprintf("%d of %d members were not ready voters within %ds; the operator keeps working on it "+
		"(members that never start are replaced after the same time); change the spec or fix what blocks the members",
		w.healthyVoters(), w.desired(), secs)
}

func hasReason(w *world, typ, reason string) bool {
	c := conditions.Get(w.cluster.Status.Conditions, typ)
	return c != nil && c.Reason == reason
}

// deadlineTimer is the time until the target's deadline, while it is still
// worked on and the deadline has not passed.
func deadlineTimer(w *world) *time.Duration {
	st := w.cluster.Status
	if st.ProgressDeadline == nil || overdue(w) {
		return nil
	}
	d := st.ProgressDeadline.Sub(w.now)
	return &d
}
