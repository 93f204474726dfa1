package cluster

import (
	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// The cluster controller's metrics (package metrics defines them): what a
// pass changed that a metric counts, observed after the status is written.

// observeDayTwo records, after the status is written, a restore that formed
// the cluster, a recovery that completed, and when the certificates the
// members mount expire.
func (r *Reconciler) observeDayTwo(w *world) {
	before, after := &w.original.Status, &w.cluster.Status
	if before.ClusterID == "" && after.ClusterID != "" {
		for _, m := range w.members {
			if m.Spec.Restore != nil {
				r.Metrics.RestoreFinished(w.cluster.Namespace, w.cluster.Name, metrics.Restored)
				break
			}
		}
	}
	if rec := after.Recovery; rec != nil && rec.Phase == v1alpha2.RecoveryCompleted &&
		(before.Recovery == nil || before.Recovery.Phase != v1alpha2.RecoveryCompleted) {
		source := "survivor"
		if rec.Snapshot != "" {
			source = "snapshot"
		}
		r.Metrics.QuorumRecovered(w.cluster.Namespace, w.cluster.Name, source)
	}
	r.Metrics.ObserveCertificates(w.cluster.Namespace, w.cluster.Name, w.secrets)
}
