package metrics

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// dayTwo holds the metrics of defragmentation runs, restores and the
// certificates a cluster mounts.
type dayTwo struct {
	defrags                        *prometheus.CounterVec
	lastDefrag, lastDefragDuration *prometheus.GaugeVec
	lastDefragReclaimed            *prometheus.GaugeVec
	restores                       *prometheus.CounterVec
	recoveries                     *prometheus.CounterVec
	certificateExpiry              *prometheus.GaugeVec
}

func newDayTwo() dayTwo {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd_operator", Name: name, Help: help}, append(slices.Clone(clusterLabels), labels...))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd_operator", Name: name, Help: help}, append(slices.Clone(clusterLabels), labels...))
	}
	return dayTwo{
		defrags: counter("defrags_total",
			"Finished EtcdDefrag runs by policy (empty for a run made by hand) and result: complete, or the Failed reason.", "policy", "result"),
		lastDefrag:          gauge("defrag_last_success_timestamp_seconds", "When the latest complete defragmentation run of the cluster ended, in seconds since the epoch."),
		lastDefragDuration:  gauge("defrag_last_duration_seconds", "How long the latest complete defragmentation run took, from its start to its end."),
		lastDefragReclaimed: gauge("defrag_last_reclaimed_bytes", "The bytes the latest complete defragmentation run reclaimed, summed over its members."),
		restores: counter("restores_total",
			"Restores of a snapshot into a cluster's seed by result: restored, or why an attempt failed (each new failure once).", "result"),
		recoveries: counter("quorum_recoveries_total",
			"Recoveries from quorum loss carried out, by what the cluster was rebuilt from (survivor or snapshot).", "source"),
		certificateExpiry: gauge("certificate_expiry_timestamp_seconds",
			"When the first certificate in a key of a TLS Secret the cluster's members mount expires, in seconds since the epoch.", "secret", "key"),
	}
}

func (d dayTwo) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.defrags, d.lastDefrag, d.lastDefragDuration, d.lastDefragReclaimed, d.restores, d.recoveries, d.certificateExpiry}
}

func (d dayTwo) forget(l prometheus.Labels) {
	for _, g := range []*prometheus.GaugeVec{d.lastDefrag, d.lastDefragDuration, d.lastDefragReclaimed} {
		g.Delete(l)
	}
	d.certificateExpiry.DeletePartialMatch(l)
	for _, c := range []*prometheus.CounterVec{d.defrags, d.restores, d.recoveries} {
		c.DeletePartialMatch(l)
	}
}

// DefragResult is a finished EtcdDefrag run as its metrics see it.
type DefragResult struct {
	Namespace, Cluster, Policy string
	// Result is DefragComplete or the reason the run failed.
	Result         string
	Completed      time.Time
	Duration       time.Duration
	ReclaimedBytes int64
}

// DefragComplete is the result label of a run that completed.
const DefragComplete = "complete"

// DefragFinished records a run that reached Complete or Failed.
func (m *Metrics) DefragFinished(r DefragResult) {
	if m == nil {
		return
	}
	m.defrags.WithLabelValues(r.Namespace, r.Cluster, r.Policy, r.Result).Inc()
	if r.Result != DefragComplete {
		return
	}
	l := clusterOf(r.Namespace, r.Cluster)
	m.lastDefrag.With(l).Set(float64(r.Completed.Unix()))
	m.lastDefragDuration.With(l).Set(r.Duration.Seconds())
	m.lastDefragReclaimed.With(l).Set(float64(r.ReclaimedBytes))
}

// Restored is the result label of a restore that succeeded.
const Restored = "restored"

// RestoreFinished counts a restore into the cluster's seed: result is
// Restored or why the attempt failed.
func (m *Metrics) RestoreFinished(namespace, cluster, result string) {
	if m == nil {
		return
	}
	m.restores.WithLabelValues(namespace, cluster, result).Inc()
}

// QuorumRecovered counts a recovery from quorum loss that completed;
// source is "survivor" or "snapshot".
func (m *Metrics) QuorumRecovered(namespace, cluster, source string) {
	if m == nil {
		return
	}
	m.recoveries.WithLabelValues(namespace, cluster, source).Inc()
}

// ObserveCertificates records when the certificates in the cluster's
// mounted Secrets expire: for each key holding PEM certificates, the
// earliest end of validity among them (a bundle is as good as its first
// certificate to expire). A Secret no longer mounted loses its series.
func (m *Metrics) ObserveCertificates(namespace, cluster string, secrets map[string]*corev1.Secret) {
	if m == nil {
		return
	}
	m.certificateExpiry.DeletePartialMatch(clusterOf(namespace, cluster))
	for name, sec := range secrets {
		if sec == nil {
			continue
		}
		for key, data := range sec.Data {
			if end, ok := EarliestExpiry(data); ok {
				m.certificateExpiry.WithLabelValues(namespace, cluster, name, key).Set(float64(end.Unix()))
			}
		}
	}
}

// EarliestExpiry is the earliest NotAfter of the PEM certificates in data;
// ok is false when data holds none (a private key, a password).
func EarliestExpiry(data []byte) (time.Time, bool) {
	var earliest time.Time
	found := false
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return earliest, found
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		if !found || cert.NotAfter.Before(earliest) {
			earliest, found = cert.NotAfter, true
		}
	}
}
