package cluster

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// What this operator process saw of each member, for a recovery plan
// to say how far behind a discarded member was (see recover.go).

// seenCache keeps the last report each member's etcd gave this operator
// process, per cluster: a discarded member's "last known" applied index.
type seenCache struct {
	mu sync.Mutex
	by map[string]map[types.UID]seenReport
}

// seenReport is a member's last report.
type seenReport struct {
	applied uint64
	at      time.Time
}

// record notes the reports of this pass, forgets members that are gone,
// and returns what is known of every member of the world, by name.
func (c *seenCache) record(w *world) map[string]seenReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]map[types.UID]seenReport{}
	}
	key := w.cluster.Namespace + "/" + w.cluster.Name
	before, now := c.by[key], map[types.UID]seenReport{}
	out := map[string]seenReport{}
	for _, m := range w.members {
		r, ok := before[m.UID]
		if st := w.etcd.status[m.Name]; st != nil {
			r, ok = seenReport{applied: st.RaftAppliedIndex, at: w.now}, true
		}
		if ok {
			now[m.UID], out[m.Name] = r, r
		}
	}
	c.by[key] = now
	return out
}

// withRecorded adds, for the members this process has no report of, the
// reports the cluster's status kept from when it became leaderless (an
// operator restarted during the incident knows nothing else of them).
func withRecorded(seen map[string]seenReport, recorded []v1alpha2.MemberReport) map[string]seenReport {
	if seen == nil {
		seen = map[string]seenReport{}
	}
	for _, r := range recorded {
		if _, ok := seen[r.Name]; !ok && r.AppliedIndex >= 0 {
			seen[r.Name] = seenReport{applied: uint64(r.AppliedIndex), at: r.Time.Time}
		}
	}
	return seen
}

// lastReports is what status.lastReports holds after this pass: while the
// cluster is leaderless, every member's last report known to this pass,
// by name; nil otherwise.
func lastReports(w *world) []v1alpha2.MemberReport {
	if noLeaderSince(w) == nil {
		return nil
	}
	// A pass that could not dial etcd has no reports of its own.
	seen := withRecorded(maps.Clone(w.seen), w.cluster.Status.LastReports)
	var out []v1alpha2.MemberReport
	for _, m := range w.members {
		r, ok := seen[m.Name]
		if !ok {
			continue
		}
		report := v1alpha2.MemberReport{Name: m.Name, AppliedIndex: int64(r.applied), Time: metav1.Time{Time: r.at.Truncate(time.Second)}}
		// A member answering without a leader applies nothing: its report
		// keeps the time it was first recorded, so passes write no status.
		if i := slices.IndexFunc(w.cluster.Status.LastReports, func(k v1alpha2.MemberReport) bool { return k.Name == m.Name }); i >= 0 &&
			w.cluster.Status.LastReports[i].AppliedIndex == report.AppliedIndex {
			report.Time = w.cluster.Status.LastReports[i].Time
		}
		out = append(out, report)
	}
	slices.SortFunc(out, func(a, b v1alpha2.MemberReport) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// forget drops what is known of a cluster's members (the cluster is gone).
func (c *seenCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, key)
}
