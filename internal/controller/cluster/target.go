package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
	"github.com/seed74754924/etcd-operator/internal/conditions"
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
		st.ClusterToken = build.ClusterToken(w.cluster)
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
		fmt.Sprintf("%s: %d members of etcd %s", message, st.Observed.Replicas, st.Observed.Version))
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

func replicas(s *v1alpha2.EtcdClusterSpec) int32 {
	if s.Replicas == nil {
		return 3
	}
	return *s.Replicas
}

// observe copies the parts of the spec that the operator acts on.
func observe(s *v1alpha2.EtcdClusterSpec) *v1alpha2.ObservedClusterSpec {
	s = s.DeepCopy()
	storage := s.Storage
	if storage.Size.IsZero() {
		storage.Size = resource.MustParse("1Gi")
	}
	return &v1alpha2.ObservedClusterSpec{
		Replicas:                  replicas(s),
		Version:                   s.Version,
		Storage:                   storage,
		Resources:                 s.Resources,
		Affinity:                  s.Affinity,
		TopologySpreadConstraints: s.TopologySpreadConstraints,
		AdditionalMetadata:        s.AdditionalMetadata,
		Options:                   s.Options,
		ImagePullSecrets:          s.ImagePullSecrets,
	}
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
		if !ready(m) || lost(m) || !m.Status.IsVoter || m.Spec.InitialCluster == "" {
			return false
		}
	}
	return true
}

// terminal reports whether the latched target was given up (BootstrapFailed or
// DeadlineExceeded): no member is created or removed for it any more.
func terminal(w *world) bool {
	c := conditions.Get(w.cluster.Status.Conditions, conditions.Progressing)
	return c != nil && c.Status == metav1.ConditionFalse &&
		(c.Reason == conditions.ReasonBootstrapFailed || c.Reason == conditions.ReasonDeadlineExceeded)
}

// latchTarget adopts a new spec at a boundary and escalates an expired
// deadline.
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
	if st.ProgressDeadline == nil || w.now.Before(st.ProgressDeadline.Time) {
		return nil, nil
	}
	if specChanged(w) {
		r.adopt(w, conditions.ReasonRetryAfterDeadline, "The deadline of the previous target expired; adopted the changed spec")
		return done(), nil
	}
	if !terminal(w) {
		r.giveUp(w)
	}
	return nil, nil
}

func (r *Reconciler) giveUp(w *world) {
	st := &w.cluster.Status
	reason, msg := conditions.ReasonDeadlineExceeded,
		fmt.Sprintf("%d of %d members were not ready within %ds; change the spec (or fix what blocks the members) to try again",
			w.readyCount(), w.desired(), progressDeadlineSeconds(&w.cluster.Spec))
	if st.ClusterID == "" {
		reason, msg = conditions.ReasonBootstrapFailed,
			fmt.Sprintf("the cluster did not form within %ds; delete and recreate the EtcdCluster after fixing what blocked the seed member",
				progressDeadlineSeconds(&w.cluster.Spec))
	}
	conditions.Set(&st.Conditions, w.cluster.Generation, conditions.Progressing, metav1.ConditionFalse, reason, msg)
	r.event(w.cluster, true, reason, "GiveUp", "%s", msg)
}

// wanted is the next deadline timer, if the target is still being worked on.
func wanted(w *world) *time.Duration {
	st := w.cluster.Status
	if st.ProgressDeadline == nil || terminal(w) {
		return nil
	}
	d := st.ProgressDeadline.Sub(w.now)
	if d < 0 {
		d = 0
	}
	return &d
}
