package defrag

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// The deadline covers the worst sweep: every member of the largest cluster
// at the longest Defragment, the gap and the probes between, and one more.
func TestDeadlineCoversTheWorstSweep(t *testing.T) {
	if Deadline != 45*time.Minute+15*time.Second {
		t.Errorf("Deadline = %s, want 45m15s", Deadline)
	}
	if worst := maxMembers * (defragTimeout + retry + maxMembers*statusTimeout); Deadline <= worst {
		t.Errorf("Deadline %s does not cover a sweep of %s", Deadline, worst)
	}
}

func restingCluster(mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 2}}
	c.Status.Observed = &v1alpha2.ObservedClusterSpec{Replicas: 3}
	c.Status.Conditions = []metav1.Condition{{Type: conditions.Progressing, Status: metav1.ConditionFalse, Reason: conditions.ReasonReconciled, ObservedGeneration: 2}}
	for _, m := range mods {
		m(c)
	}
	return c
}

func progressing(reason string, status metav1.ConditionStatus, gen int64) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) {
		c.Status.Conditions[0].Reason, c.Status.Conditions[0].Status, c.Status.Conditions[0].ObservedGeneration = reason, status, gen
	}
}

func TestBusy(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *v1alpha2.EtcdCluster
		want string
	}{
		{"at rest", restingCluster(), ""},
		{"rolling out", restingCluster(progressing(conditions.ReasonRollingOut, metav1.ConditionTrue, 2)), "RollingOut"},
		{"scaling up", restingCluster(progressing(conditions.ReasonScalingUp, metav1.ConditionTrue, 2)), "ScalingUp"},
		{"paused", restingCluster(progressing(conditions.ReasonPaused, metav1.ConditionFalse, 2)), "Paused"},
		{"behind its spec", restingCluster(progressing(conditions.ReasonReconciled, metav1.ConditionFalse, 1)), "generation 2"},
		{"not formed", restingCluster(func(c *v1alpha2.EtcdCluster) { c.Status.Observed = nil }), "not formed"},
		{"no progress yet", restingCluster(func(c *v1alpha2.EtcdCluster) { c.Status.Conditions = nil }), "not reported"},
		{"being deleted", restingCluster(func(c *v1alpha2.EtcdCluster) { c.DeletionTimestamp = &metav1.Time{} }), "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := busy(tc.c)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("busy = %q, want %q", got, tc.want)
			}
		})
	}
}

// healthyPass is three members, m2 leading, all in term 5 and caught up.
func healthyPass(mods ...func(*pass)) *pass {
	p := &pass{cluster: restingCluster(), status: map[string]*etcd.Status{}, statusErr: map[string]error{}}
	for i, name := range []string{"m0", "m1", "m2"} {
		p.members = append(p.members, &v1alpha2.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: name}})
		p.status[name] = &etcd.Status{MemberID: uint64(i + 1), Leader: 3, RaftTerm: 5, RaftAppliedIndex: 5000}
	}
	for _, m := range mods {
		m(p)
	}
	p.leader = nil
	for _, st := range p.status {
		if st.Leader == st.MemberID && st.Leader != 0 {
			p.leader = st
		}
	}
	return p
}

func TestUnhealthy(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*pass)
		want string
	}{
		{"healthy", func(*pass) {}, ""},
		{"NOSPACE does not block", func(p *pass) {
			p.status["m0"].Errors = []string{"memberID:1 alarm:NOSPACE "}
		}, ""},
		{"CORRUPT blocks", func(p *pass) { p.status["m0"].Errors = []string{"memberID:1 alarm:CORRUPT "} }, "CORRUPT"},
		{"a member missing", func(p *pass) { p.members = p.members[:2]; delete(p.status, "m2") }, "2 members run"},
		{"a member silent", func(p *pass) { delete(p.status, "m1"); p.statusErr["m1"] = errors.New("timeout") }, "does not answer"},
		{"an older term", func(p *pass) { p.status["m1"].RaftTerm = 4 }, "term"},
		{"no leader seen", func(p *pass) { p.status["m1"].Leader = 0 }, "no leader"},
		{"applied index far behind", func(p *pass) { p.status["m1"].RaftAppliedIndex = 100 }, "trails"},
		{"a learner", func(p *pass) { p.status["m1"].IsLearner = true }, "learner"},
		{"cannot dial", func(p *pass) { p.dialErr = errors.New("no route") }, "cannot be reached"},
		{"paused", func(p *pass) { p.cluster.Status.Observed.Replicas = 0 }, "no member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := healthyPass(tc.mod).unhealthy()
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("unhealthy = %q, want %q", got, tc.want)
			}
		})
	}
}

// plan puts the followers first, by name, and the leader last.
func TestPlanLeaderLast(t *testing.T) {
	p := healthyPass(func(p *pass) {
		for _, st := range p.status {
			st.Leader = 1
		}
	})
	p.run = &v1alpha2.EtcdDefrag{}
	p.plan()
	var got []string
	for _, r := range p.run.Status.Members {
		got = append(got, r.Name+"/"+string(r.Role))
	}
	if strings.Join(got, " ") != "m1/follower m2/follower m0/leader" {
		t.Errorf("plan %v", got)
	}
}
