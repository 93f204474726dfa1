package etcdhealth

import (
	"testing"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func TestReference(t *testing.T) {
	leader := &etcd.Status{MemberID: 1, Leader: 1, RaftTerm: 5, RaftAppliedIndex: 100}
	follower := func(id, lead, term, applied uint64) *etcd.Status {
		return &etcd.Status{MemberID: id, Leader: lead, RaftTerm: term, RaftAppliedIndex: applied}
	}
	for _, tc := range []struct {
		name     string
		statuses map[string]*etcd.Status
		want     *etcd.Status
		inferred bool
	}{
		{name: "the leader answers", statuses: map[string]*etcd.Status{"a": leader, "b": follower(2, 1, 5, 99)}, want: leader},
		{name: "the leader does not answer; its followers name it",
			statuses: map[string]*etcd.Status{"b": follower(2, 1, 5, 98), "c": follower(3, 1, 5, 99)},
			want:     &etcd.Status{MemberID: 1, Leader: 1, RaftTerm: 5, RaftAppliedIndex: 99}, inferred: true},
		{name: "a follower of an older term does not set the reference",
			statuses: map[string]*etcd.Status{"b": follower(2, 3, 4, 500), "c": follower(3, 1, 5, 99)},
			want:     &etcd.Status{MemberID: 1, Leader: 1, RaftTerm: 5, RaftAppliedIndex: 99}, inferred: true},
		{name: "nobody names a leader", statuses: map[string]*etcd.Status{"b": follower(2, 0, 5, 98), "c": nil}},
		{name: "nobody answers", statuses: map[string]*etcd.Status{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, inferred := Reference(tc.statuses)
			if (got == nil) != (tc.want == nil) || got != nil && (got.MemberID != tc.want.MemberID || got.RaftTerm != tc.want.RaftTerm ||
				got.RaftAppliedIndex != tc.want.RaftAppliedIndex) || inferred != tc.inferred {
				t.Errorf("Reference = %+v, %v; want %+v, %v", got, inferred, tc.want, tc.inferred)
			}
		})
	}
}
