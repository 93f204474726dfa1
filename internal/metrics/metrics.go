// Package metrics holds the operator's Prometheus metrics per cluster: desired
// and ready members, voters, learners, whether etcd has a leader, membership
// operations by kind and result, reconcile errors, snapshots and their
// verifications, defragmentation runs, restores, recoveries from quorum
// loss, and the expiry of the certificates its members mount; and the
// operator's build.
//
// A cluster's series are labelled etcd_cluster_namespace and etcd_cluster:
// "namespace" is the label a scrape gives the operator's own Pod, and
// "cluster" is often an external label naming the Kubernetes cluster.
package metrics

import (
	"runtime"
	runtimemetrics "runtime/metrics"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// Metrics is the set of collectors; a nil *Metrics records nothing, which
// keeps controller tests free of a registry.
type Metrics struct {
	desired, ready, voters, learners, leader *prometheus.GaugeVec
	operations, reconcileErrors              *prometheus.CounterVec
	verifications                            *prometheus.CounterVec
	lastVerification                         *prometheus.GaugeVec
	snapshots                                *prometheus.CounterVec
	lastSnapshot, lastSnapshotDuration       *prometheus.GaugeVec
	lastSnapshotSize                         *prometheus.GaugeVec
	dayTwo
	// Requests counts the controllers' own API requests.
	Requests *Requests
}

// The labels of a cluster's series.
const (
	LabelNamespace = "etcd_cluster_namespace"
	LabelCluster   = "etcd_cluster"
)

var clusterLabels = []string{LabelNamespace, LabelCluster}

func clusterOf(namespace, name string) prometheus.Labels {
	return prometheus.Labels{LabelNamespace: namespace, LabelCluster: name}
}

func snapshotGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd_operator", Name: name, Help: help}, append(clusterLabels, "schedule"))
}

// New creates the collectors and registers them, with the operator's build
// (version is what the binary was stamped with).
func New(reg prometheus.Registerer, version string) *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd_operator", Name: name, Help: help}, clusterLabels)
	}
	m := &Metrics{
		desired:  gauge("cluster_desired_members", "Members the latched target asks for."),
		ready:    gauge("cluster_ready_members", "Running voters whose Ready condition is True."),
		voters:   gauge("cluster_voters", "Voting members, as etcd lists them (or as recorded when etcd was not asked)."),
		learners: gauge("cluster_learners", "Learner members etcd lists."),
		leader:   gauge("cluster_has_leader", "1 when a member reported itself etcd's leader at the last pass, 0 when the members that answered (or none did) reported no leader."),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "membership_operations_total",
			Help: "Membership operations by kind (create, add-learner, promote, remove) and result (success, error).",
		}, append(clusterLabels, "operation", "result")),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "cluster_reconcile_errors_total", Help: "Reconcile passes of a cluster that ended in an error.",
		}, clusterLabels),
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "snapshot_verifications_total",
			Help: "Finished snapshot verifications by result: passed, or the Verified condition's reason (ArtifactMissing, Mismatch, RestoreFailed, VerificationFailed).",
		}, append(clusterLabels, "result")),
		lastVerification: gauge("snapshot_last_verification_passed", "1 when the cluster's latest finished snapshot verification passed, 0 when it failed."),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "snapshots_total",
			Help: "Finished snapshots by schedule (empty for a one-shot snapshot) and result: stored, or the Failed reason.",
		}, append(clusterLabels, "schedule", "result")),
		lastSnapshot:         snapshotGauge("snapshot_last_success_timestamp_seconds", "When the latest stored snapshot of the cluster (and schedule) completed, in seconds since the epoch."),
		lastSnapshotDuration: snapshotGauge("snapshot_last_duration_seconds", "How long the latest stored snapshot took, from its Job's start to its result."),
		lastSnapshotSize:     snapshotGauge("snapshot_last_size_bytes", "The size of the latest stored snapshot."),
		dayTwo:               newDayTwo(),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "etcd_operator", Name: "build_info", Help: "Always 1; the labels say which build of the operator runs.",
	}, []string{"version", "go_version"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(m.desired, m.ready, m.voters, m.learners, m.leader, m.operations, m.reconcileErrors, m.verifications, m.lastVerification, build,
		m.snapshots, m.lastSnapshot, m.lastSnapshotDuration, m.lastSnapshotSize)
	reg.MustRegister(m.collectors()...)
	reg.MustRegister(heapLive())
	m.Requests = NewRequests(reg)
	return m
}

// ObserveCluster records the gauges of one cluster after a pass: list is
// etcd's membership and leader the leader's own report, each nil when etcd
// was not asked or did not give it.
func (m *Metrics) ObserveCluster(c *v1alpha2.EtcdCluster, members []*v1alpha2.EtcdMember, list *etcd.MemberList, leader *etcd.Status) {
	if m == nil {
		return
	}
	l := clusterOf(c.Namespace, c.Name)
	if c.Status.Observed != nil {
		m.desired.With(l).Set(float64(c.Status.Observed.Replicas))
	}
	m.ready.With(l).Set(float64(c.Status.ReadyMembers))
	voters, learners := 0, 0
	if list != nil {
		for _, em := range list.Members {
			if em.IsLearner {
				learners++
			} else {
				voters++
			}
		}
	} else {
		for _, mm := range members {
			if mm.Status.IsVoter && mm.DeletionTimestamp == nil && !mm.Spec.Dormant {
				voters++
			}
		}
	}
	m.voters.With(l).Set(float64(voters))
	if list != nil {
		m.learners.With(l).Set(float64(learners))
	}
	hasLeader := 0.0
	if leader != nil && leader.Leader != 0 && leader.Leader == leader.MemberID {
		hasLeader = 1
	}
	m.leader.With(l).Set(hasLeader)
}

// MembershipOp counts one membership operation.
func (m *Metrics) MembershipOp(c *v1alpha2.EtcdCluster, op string, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.operations.WithLabelValues(c.Namespace, c.Name, op, result).Inc()
}

// SnapshotVerified records a finished verification of a snapshot of the
// cluster; result is "passed" or the reason it failed.
func (m *Metrics) SnapshotVerified(namespace, cluster, result string) {
	if m == nil {
		return
	}
	m.verifications.WithLabelValues(namespace, cluster, result).Inc()
	passed := 0.0
	if result == VerificationPassed {
		passed = 1
	}
	m.lastVerification.WithLabelValues(namespace, cluster).Set(passed)
}

// SnapshotResult is a finished snapshot as its metrics see it.
type SnapshotResult struct {
	Namespace, Cluster, Schedule string
	// Result is SnapshotStored or the reason it failed.
	Result    string
	Completed time.Time
	Duration  time.Duration
	SizeBytes int64
}

// SnapshotStored is the result label of a stored snapshot.
const SnapshotStored = "stored"

// SnapshotFinished records a snapshot that reached Complete or Failed.
func (m *Metrics) SnapshotFinished(r SnapshotResult) {
	if m == nil {
		return
	}
	m.snapshots.WithLabelValues(r.Namespace, r.Cluster, r.Schedule, r.Result).Inc()
	if r.Result != SnapshotStored {
		return
	}
	l := prometheus.Labels{LabelNamespace: r.Namespace, LabelCluster: r.Cluster, "schedule": r.Schedule}
	m.lastSnapshot.With(l).Set(float64(r.Completed.Unix()))
	m.lastSnapshotDuration.With(l).Set(r.Duration.Seconds())
	m.lastSnapshotSize.With(l).Set(float64(r.SizeBytes))
}

// VerificationPassed is the result label of a verification that passed.
const VerificationPassed = "passed"

// ReconcileError counts a failed pass.
func (m *Metrics) ReconcileError(namespace, name string) {
	if m == nil {
		return
	}
	m.reconcileErrors.WithLabelValues(namespace, name).Inc()
}

// Forget drops the series of a deleted cluster.
func (m *Metrics) Forget(namespace, name string) {
	if m == nil {
		return
	}
	l := clusterOf(namespace, name)
	for _, g := range []*prometheus.GaugeVec{m.desired, m.ready, m.voters, m.learners, m.leader, m.lastVerification} {
		g.Delete(l)
	}
	for _, g := range []*prometheus.GaugeVec{m.lastSnapshot, m.lastSnapshotDuration, m.lastSnapshotSize} {
		g.DeletePartialMatch(l)
	}
	m.snapshots.DeletePartialMatch(l)
	m.operations.DeletePartialMatch(l)
	m.verifications.DeletePartialMatch(l)
	m.reconcileErrors.Delete(l)
	m.forget(l)
}

// heapLive is the heap the last garbage collection found reachable: what
// the caches and controllers hold. Resident memory follows it (up to about
// twice it between collections, as GOGC=100 allows), so the bench projects a
// fleet's memory from how it grows with the clusters.
func heapLive() prometheus.Collector {
	sample := []runtimemetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var mu sync.Mutex
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "etcd_operator", Name: "heap_live_bytes",
		Help: "Heap bytes the last garbage collection found reachable (Go's /gc/heap/live:bytes).",
	}, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		runtimemetrics.Read(sample)
		if sample[0].Value.Kind() != runtimemetrics.KindUint64 {
			return 0
		}
		return float64(sample[0].Value.Uint64())
	})
}
