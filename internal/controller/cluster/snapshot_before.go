package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Snapshots before risky changes (spec.snapshotBefore): a changed spec whose
// adoption would change the version, scale in or pause is adopted only once
// a snapshot taken for that very change is Complete. The snapshot's name is
// derived from the change (the target left and the target asked for), so
// every pass, and an operator restarted between creating it and seeing it,
// finds the same one: it is created once. Until then the old target stays
// latched and the rest of the planner keeps working on it.

// guardedChanges are the changes of snapshotBefore.changes that adopting the
// spec would make, in the order of the API's enum.
func guardedChanges(w *world) []v1alpha2.SnapshotBeforeChange {
	sb, old := w.cluster.Spec.SnapshotBefore, w.cluster.Status.Observed
	if sb == nil || old == nil {
		return nil
	}
	next := manifest.Observe(&w.cluster.Spec)
	var out []v1alpha2.SnapshotBeforeChange
	add := func(c v1alpha2.SnapshotBeforeChange, happens bool) {
		if happens && slices.Contains(sb.Changes, c) {
			out = append(out, c)
		}
	}
	add(v1alpha2.SnapshotBeforeVersionChange, next.Version != old.Version)
	add(v1alpha2.SnapshotBeforeScaleIn, next.Replicas > 0 && next.Replicas < old.Replicas)
	add(v1alpha2.SnapshotBeforePause, next.Replicas == 0 && old.Replicas > 0)
	return out
}

// snapshotBeforeName names the snapshot of one change: the cluster's name,
// then a hash of the cluster, the target left and the target asked for.
func snapshotBeforeName(w *world) string {
	old, next := w.cluster.Status.Observed, manifest.Observe(&w.cluster.Spec)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%s %d %s -> %d %s", w.cluster.UID, w.cluster.Status.ClusterID,
		old.Version, old.Replicas, w.cluster.Status.ClusterToken, next.Replicas, next.Version))
	name := w.cluster.Name
	if len(name) > 200 {
		name = name[:200]
	}
	return name + "-before-" + hex.EncodeToString(sum[:4])
}

// readSnapshotBefore reads, from the cache, the snapshot the change the spec
// asks for waits on, and the schedule it is to be made from.
func (r *Reconciler) readSnapshotBefore(ctx context.Context, w *world) {
	if len(guardedChanges(w)) == 0 || len(w.running()) == 0 {
		return
	}
	s := &v1alpha2.EtcdSnapshot{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: w.cluster.Namespace, Name: snapshotBeforeName(w)}, s)
	switch {
	case err == nil:
		w.before.snapshot = s
	case !apierrors.IsNotFound(err):
		w.before.err = err
		return
	}
	if ref := w.cluster.Spec.SnapshotBefore.ScheduleRef; ref != nil && w.before.snapshot == nil {
		sched := &v1alpha2.EtcdSnapshotSchedule{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: w.cluster.Namespace, Name: ref.Name}, sched)
		switch {
		case err == nil:
			w.before.schedule = sched
		case !apierrors.IsNotFound(err):
			w.before.err = err
		}
	}
}

// beforeView is what the pass knows of the snapshot a change waits on.
type beforeView struct {
	snapshot *v1alpha2.EtcdSnapshot
	schedule *v1alpha2.EtcdSnapshotSchedule
	err      error
}

// snapshotFirst holds the adoption of a changed spec until its snapshot is
// Complete: it takes the snapshot, or waits for it, or reports its failure.
// It returns true when the adoption waits (the planner goes on with the
// target already latched), false when it may go ahead.
func (pl *planner) snapshotFirst() bool {
	w := pl.w
	changes := guardedChanges(w)
	if len(changes) == 0 {
		return false
	}
	if len(w.running()) == 0 {
		// Nothing runs to take a snapshot of (a paused cluster).
		return false
	}
	what := changeList(changes)
	name := snapshotBeforeName(w)
	sb := w.cluster.Spec.SnapshotBefore
	switch s := w.before.snapshot; {
	case w.before.err != nil:
		pl.working(conditions.ReasonTakingSnapshotBefore, "Reading snapshot %s, taken before the %s: %v", name, what, w.before.err)
	case s != nil && s.Status.Phase == v1alpha2.SnapshotComplete:
		return false
	case s != nil && s.Status.Phase == v1alpha2.SnapshotFailed:
		pl.p.snapshotBeforeFailed = fmt.Sprintf("Snapshot %s, taken before the %s, failed (%s); the change waits: delete the snapshot to take "+
			"it again, or take %s off spec.snapshotBefore.changes", name, what, snapshotFailure(s), enumList(changes))
	case s != nil:
		pl.working(conditions.ReasonTakingSnapshotBefore, "Waiting for snapshot %s before the %s", name, what)
	case sb.ScheduleRef != nil && w.before.schedule == nil:
		pl.p.snapshotBeforeFailed = fmt.Sprintf("The %s waits for a snapshot from EtcdSnapshotSchedule %s (spec.snapshotBefore.scheduleRef), "+
			"which does not exist: create it, or name another", what, sb.ScheduleRef.Name)
	case sb.ScheduleRef != nil && w.before.schedule.Spec.SnapshotTemplate.Spec.ClusterRef.Name != w.cluster.Name:
		pl.p.snapshotBeforeFailed = fmt.Sprintf("The %s waits for a snapshot from EtcdSnapshotSchedule %s (spec.snapshotBefore.scheduleRef), "+
			"which snapshots cluster %s, not this one", what, sb.ScheduleRef.Name, w.before.schedule.Spec.SnapshotTemplate.Spec.ClusterRef.Name)
	default:
		pl.working(conditions.ReasonTakingSnapshotBefore, "Taking snapshot %s before the %s", name, what)
		return pl.choose(&change{kind: takeSnapshot, snapshot: newSnapshotBefore(w, name, what),
			reason: conditions.ReasonTakingSnapshotBefore, message: fmt.Sprintf("Taking snapshot %s before the %s", name, what)})
	}
	return true
}

func changeList(cs []v1alpha2.SnapshotBeforeChange) string {
	words := map[v1alpha2.SnapshotBeforeChange]string{
		v1alpha2.SnapshotBeforeVersionChange: "version change", v1alpha2.SnapshotBeforeScaleIn: "scale-in", v1alpha2.SnapshotBeforePause: "pause",
	}
	var out []string
	for _, c := range cs {
		out = append(out, words[c])
	}
	return strings.Join(out, " and ")
}

func enumList(cs []v1alpha2.SnapshotBeforeChange) string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c))
	}
	return strings.Join(out, " and ")
}

// snapshotFailure is why a snapshot failed, from its Ready condition.
func snapshotFailure(s *v1alpha2.EtcdSnapshot) string {
	if c := conditions.Get(s.Status.Conditions, conditions.Ready); c != nil && c.Message != "" {
		return c.Reason + ": " + c.Message
	}
	return "no reason recorded"
}

// newSnapshotBefore is the snapshot to take: from the schedule's template,
// belonging to the schedule (its retention keeps or deletes it), or to
// snapshotBefore's destination, belonging to nobody (kept until deleted).
func newSnapshotBefore(w *world, name, what string) *v1alpha2.EtcdSnapshot {
	c := w.cluster
	s := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: c.Namespace,
		Labels:      map[string]string{manifest.LabelCluster: c.Name},
		Annotations: map[string]string{manifest.AnnotationSnapshotBefore: what},
	}}
	if sched := w.before.schedule; sched != nil {
		tmpl := sched.Spec.SnapshotTemplate
		if md := tmpl.Metadata; md != nil {
			maps.Copy(s.Labels, md.Labels)
			maps.Copy(s.Annotations, md.Annotations)
			s.Labels[manifest.LabelCluster] = c.Name
			s.Annotations[manifest.AnnotationSnapshotBefore] = what
		}
		s.Labels[manifest.LabelSchedule] = sched.Name
		s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sched, v1alpha2.GroupVersion.WithKind("EtcdSnapshotSchedule"))}
		s.Spec = *tmpl.Spec.DeepCopy()
		return s
	}
	s.Spec = v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: c.Name}, Destination: *w.cluster.Spec.SnapshotBefore.Destination.DeepCopy()}
	return s
}

// takeSnapshot creates the snapshot a changed spec waits for. One that
// exists already (an operator stopped after creating it, before seeing it)
// is the one.
func (r *Reconciler) takeSnapshot(ctx context.Context, w *world, c *change) error {
	err := r.Client.Create(ctx, c.snapshot)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating snapshot %s: %w", c.snapshot.Name, err)
	}
	r.event(w.cluster, false, c.reason, "SnapshotBefore", "%s", c.message)
	return nil
}

// clusterOfSnapshotBefore maps a snapshot taken before a change to its
// cluster; other snapshots wake nobody here.
func clusterOfSnapshotBefore(_ context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*v1alpha2.EtcdSnapshot)
	if !ok || s.Annotations[manifest.AnnotationSnapshotBefore] == "" || s.Spec.ClusterRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.ClusterRef.Name}}}
}
