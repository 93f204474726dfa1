// Package metrics holds the operator's Prometheus metrics per cluster: desired
// and ready members, voters, learners, whether etcd has a leader, membership
// operations by kind and result, reconcile errors, and snapshot
// verifications; and the operator's build.
//
// A cluster's series are labelled etcd_cluster_namespace and etcd_cluster:
// "namespace" is the label a scrape gives the operator's own Pod, and
// "cluster" is often an external label naming the Kubernetes cluster.
package metrics

import (
	"runtime"

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
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "etcd_operator", Name: "build_info", Help: "Always 1; the labels say which build of the operator runs.",
	}, []string{"version", "go_version"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(m.desired, m.ready, m.voters, m.learners, m.leader, m.operations, m.reconcileErrors, m.verifications, m.lastVerification, build)
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
	m.operations.DeletePartialMatch(l)
	m.verifications.DeletePartialMatch(l)
	m.reconcileErrors.Delete(l)
}
