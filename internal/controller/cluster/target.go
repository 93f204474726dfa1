package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// The locking pattern: the operator works towards status.observed, a copy of
// the spec taken at a boundary (first sight, target reached, or deadline
// expired). A spec edit in the middle of a scale waits for the boundary.

// initialize latches the token and the first target on first sight.
//
// Whatever is latched is written before anything acts on it: the pass ends
// here and the status write it leads to brings the next one.
func (r *Reconciler) initialize(_ context.Context, w *world) (*ctrl.Result, error) {
	st := &w.cluster.Status
	if st.ClusterToken != "" && st.Observed != nil {
		return nil, nil
	}
	if st.ClusterToken == "" {
		st.ClusterToken = manifest.ClusterToken(w.cluster)
	}
	if st.Observed == nil {
		r.adopt(w, conditions.ReasonInitialSnapshot, "Latched the first target")
	}
	return done(), nil
}

// adopt copies the spec into the target and starts a new deadline.
func (r *Reconciler) adopt(w *world, reason, message string) {
	st := &w.cluster.Status
	st.Observed = observe(&w.cluster.Spec)
	deadline := metav1.NewTime(w.now.Add(time.Duration(progressDeadlineSeconds(&w.cluster.Spec)) * time.Second))
	st.ProgressDeadline = &deadline
	conditions.Set(&st.Conditions, w.cluster.Generation, conditions.Progressing, metav1.ConditionTrue, reason,
		fmt.Sprintf("%s: %d members of etcd %s", message, st.Observed.Replicas, st.Observed.Version), w.now)
	w.working(reason, message)
	r.event(w.cluster, false, reason, "LatchTarget", "%s: %d members of etcd %s", message, st.Observed.Replicas, st.Observed.Version)
	if warn := memoryStorageWarning(st.Observed); warn != "" {
		r.event(w.cluster, true, conditions.ReasonStorageTooSmall, "LatchTarget", "%s", warn)
	}
}

func progressDeadlineSeconds(s *v1alpha2.EtcdClusterSpec) int32 {
	if s.ProgressDeadlineSeconds == nil {
		return 600
	}
	return *s.ProgressDeadlineSeconds
}

// observe copies the parts of the spec that the operator acts on.
func observe(s *v1alpha2.EtcdClusterSpec) *v1alpha2.ObservedClusterSpec {
	return manifest.Observe(s)
}

// specChanged reports whether the spec asks for something the target lacks.
func specChanged(w *world) bool {
	return !equality.Semantic.DeepEqual(observe(&w.cluster.Spec), w.cluster.Status.Observed)
}

// targetReached: the latched number of members run, the cluster formed (unless
// paused from the start), every running member is Ready and a voter, and no
// member is lost or leaving.
func targetReached(w *world) bool {
	running := w.running()
	if len(running) != w.desired() || len(w.leaving()) > 0 {
		return false
	}
	if w.desired() > 0 && w.cluster.Status.ClusterID == "" {
		return false
	}
	for _, m := range running {
		if !ready(m) || lost(m) || !w.isVoter(m) || m.Spec.InitialCluster == "" || !w.upToDate(m) {
			return false
		}
	}
	// etcd's cluster version follows the members' version a moment later.
	return w.desired() == 0 || w.cluster.Status.ClusterVersion == minorOf(w.cluster.Status.Observed.Version)
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

// latchTarget adopts a new spec at a boundary (the target reached, or its
// deadline passed) and reports a missed deadline once.
func (r *Reconciler) latchTarget(_ context.Context, w *world) (*ctrl.Result, error) {
	st := &w.cluster.Status
	if targetReached(w) {
		st.ProgressDeadline = nil
		if specChanged(w) {
			r.adopt(w, conditions.ReasonSpecChanged, "Adopted the changed spec")
			return done(), nil
		}
		return nil, nil
	}
	if hasReason(w, conditions.Progressing, conditions.ReasonVersionChangeRefused) && specChanged(w) {
		// The target was refused before any member was touched: nothing
		// to finish first.
		r.adopt(w, conditions.ReasonSpecChanged, "The previous target's version was refused; adopted the changed spec")
		return done(), nil
	}
	if !overdue(w) {
		return nil, nil
	}
	if specChanged(w) {
		r.adopt(w, conditions.ReasonRetryAfterDeadline, "The deadline of the previous target expired; adopted the changed spec")
		return done(), nil
	}
	if reason, _ := deadlineReport(w); !hasReason(w, conditions.Progressing, reason) {
		r.event(w.cluster, true, reason, "Deadline", "%s", deadlineMessage(w))
	}
	return nil, nil
}

// deadlineReport is the Progressing reason and message of a missed deadline.
func deadlineReport(w *world) (string, string) {
	if w.cluster.Status.ClusterID == "" {
		return conditions.ReasonBootstrapFailed, deadlineMessage(w)
	}
	return conditions.ReasonDeadlineExceeded, deadlineMessage(w)
}

func deadlineMessage(w *world) string {
	secs := progressDeadlineSeconds(&w.cluster.Spec)
	if w.cluster.Status.ClusterID == "" {
		return fmt.Sprintf("the cluster did not form within %ds; it is still adopted if the seed member forms it, "+
			"else delete and recreate the EtcdCluster after fixing what blocks the seed", secs)
	}
	return fmt.Sprintf("%d of %d members were not ready voters within %ds; the operator keeps working on it "+
		"(members that never start are replaced after the same time); change the spec or fix what blocks the members",
		w.readyVoters(), w.desired(), secs)
}

func hasReason(w *world, typ, reason string) bool {
	c := conditions.Get(w.cluster.Status.Conditions, typ)
	return c != nil && c.Reason == reason
}

// wanted is the next deadline timer, if the target is still being worked on
// and its deadline has not passed yet.
func wanted(w *world) *time.Duration {
	st := w.cluster.Status
	if st.ProgressDeadline == nil || overdue(w) {
		return nil
	}
	d := st.ProgressDeadline.Sub(w.now)
	return &d
}
