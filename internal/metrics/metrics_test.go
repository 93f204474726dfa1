package metrics

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func available(c *v1alpha2.EtcdCluster) {
	c.Status.Conditions = []metav1.Condition{{Type: conditions.Available, Status: metav1.ConditionTrue, Reason: conditions.ReasonQuorumAvailable}}
}

// TestHasLeaderIsEtcdsWord checks that the leader gauge follows the leader's
// own report, not the Available condition: a cluster can still say Available
// from its last pass while no member leads, and the reverse.
func TestHasLeaderIsEtcdsWord(t *testing.T) {
	list := &etcd.MemberList{Members: []etcd.Member{{ID: 1}, {ID: 2}, {ID: 3}}}
	tests := []struct {
		name      string
		available bool
		leader    *etcd.Status
		want      float64
	}{
		{"a member reports itself the leader", false, &etcd.Status{MemberID: 2, Leader: 2, RaftTerm: 4}, 1},
		{"no report of a leader, though Available says True", true, nil, 0},
		{"the report names another member", true, &etcd.Status{MemberID: 2, Leader: 3}, 0},
		{"the report names none", true, &etcd.Status{MemberID: 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := New(reg, "v1.2.3")
			c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "db"}}
			if tt.available {
				available(c)
			}
			m.ObserveCluster(c, nil, list, tt.leader)
			got := testutil.ToFloat64(m.leader.With(clusterOf("prod", "db")))
			if got != tt.want {
				t.Errorf("cluster_has_leader = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLabelsDoNotCollideWithTheScrapes checks the cluster series carry
// labels a scrape does not set on its own (namespace, pod, cluster), and the
// build's series is there.
func TestLabelsDoNotCollideWithTheScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, "v1.2.3")
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "db"}}
	m.ObserveCluster(c, nil, &etcd.MemberList{Members: []etcd.Member{{ID: 1}}}, &etcd.Status{MemberID: 1, Leader: 1})
	m.MembershipOp(c, "promote", nil)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				switch l.GetName() {
				case "namespace", "cluster", "pod", "instance", "job":
					t.Errorf("%s has a %q label, which a scrape sets itself", f.GetName(), l.GetName())
				}
			}
		}
	}
	for _, name := range []string{"etcd_operator_cluster_voters", "etcd_operator_cluster_has_leader", "etcd_operator_membership_operations_total"} {
		if !seen[name] {
			t.Errorf("%s is not gathered", name)
		}
	}
	want := `
# HELP etcd_operator_build_info Always 1; the labels say which build of the operator runs.
# TYPE etcd_operator_build_info gauge
etcd_operator_build_info{go_version="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "etcd_operator_build_info"); err != nil {
		t.Error(err)
	}
	m.Forget("prod", "db")
	if n := testutil.CollectAndCount(m.leader); n != 0 {
		t.Errorf("%d leader series left after Forget", n)
	}
}

// TestHeapLiveFollowsWhatIsHeld: the live-heap gauge grows by what the
// process keeps reachable across a collection, and falls when it lets go.
func TestHeapLiveFollowsWhatIsHeld(t *testing.T) {
	g := heapLive()
	runtime.GC()
	before := testutil.ToFloat64(g)
	held := make([][]byte, 64)
	for i := range held {
		held[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	with := testutil.ToFloat64(g)
	if with-before < 48<<20 {
		t.Fatalf("live heap grew by %.0f bytes with 64 MiB held, want most of it", with-before)
	}
	runtime.KeepAlive(held)
	clear(held) // the 64 MiB is unreachable now
	runtime.GC()
	if after := testutil.ToFloat64(g); after > with-48<<20 {
		t.Fatalf("live heap %.0f after letting 64 MiB go, was %.0f", after, with)
	}
}
