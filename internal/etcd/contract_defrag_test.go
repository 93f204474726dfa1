package etcd_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func init() {
	scenarios = append(scenarios, scenario{"defragmentation and NOSPACE alarms", defragAndAlarms})
}

// raiser is what the alarm scenario needs beyond testCluster: raising an
// alarm as etcd does when a member's backend reaches its quota.
type raiser interface {
	raiseNoSpace(t *testing.T, name string)
}

// defragAndAlarms: a voter defragments on its own, also cut off from a
// quorum (the call never goes through raft); a learner refuses; an alarm is
// listed by everyone, reported in every member's status, and disarmed once
// (a second disarm clears nothing).
func defragAndAlarms(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	if err := via.Defragment(ctxT(t), c.clientURL("m0")); err != nil {
		t.Fatalf("defragmenting a voter: %v", err)
	}
	st, err := via.Status(ctxT(t), c.clientURL("m0"))
	if err != nil {
		t.Fatal(err)
	}
	if st.DBSize <= 0 || st.DBSizeInUse > st.DBSize {
		t.Errorf("after a defragmentation the backend is %d bytes with %d in use", st.DBSize, st.DBSizeInUse)
	}
	grow(t, c, via, "m1")
	c.eventually(t, "adding m2", func() (bool, string) {
		_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m2")})
		return err == nil, fmt.Sprint(err)
	})
	c.start(t, "m2")
	lc := c.client(t, "m2")
	c.eventually(t, "a learner refusing to defragment", func() (bool, string) {
		err := lc.Defragment(ctxT(t), c.clientURL("m2"))
		return errors.Is(err, etcd.ErrLearnerRefused), fmt.Sprint(err)
	})

	id := idOf(t, via, c.peerURL("m0"))
	c.(raiser).raiseNoSpace(t, "m0")
	alarms, err := via.AlarmList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := etcd.Alarm{MemberID: id, Type: etcd.AlarmNoSpace}
	if !slices.Equal(alarms, []etcd.Alarm{want}) {
		t.Fatalf("alarms %+v, want %+v", alarms, want)
	}
	c.eventually(t, "the learner reporting the alarm", func() (bool, string) {
		st, err := lc.Status(ctxT(t), c.clientURL("m2"))
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(st.Alarms(), etcd.AlarmNoSpace), fmt.Sprint(st.Errors)
	})
	cleared, err := via.AlarmDisarm(ctxT(t), want)
	if err != nil || !slices.Equal(cleared, []etcd.Alarm{want}) {
		t.Fatalf("disarming: cleared %+v, %v", cleared, err)
	}
	cleared, err = via.AlarmDisarm(ctxT(t), want)
	if err != nil || len(cleared) != 0 {
		t.Fatalf("disarming again: cleared %+v, %v", cleared, err)
	}
	if alarms, err := via.AlarmList(ctxT(t)); err != nil || len(alarms) != 0 {
		t.Fatalf("alarms after disarming: %+v, %v", alarms, err)
	}

	c.stop(t, "m1")
	c.eventually(t, "m0 without a leader", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL("m0"))
		return err == nil && st.Leader == 0, fmt.Sprint(st, err)
	})
	if err := via.Defragment(ctxT(t), c.clientURL("m0")); err != nil {
		t.Errorf("defragmenting a voter cut off from a quorum: %v", err)
	}
}

func (f *fakeCluster) raiseNoSpace(_ *testing.T, name string) {
	f.c.RaiseAlarm(f.peerURL(name), etcd.AlarmNoSpace)
}

func (c *realCluster) raiseNoSpace(t *testing.T, name string) {
	s := c.member(name).server.Server
	_, err := s.Alarm(ctxT(t), &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: uint64(s.MemberID()), Alarm: etcdserverpb.AlarmType_NOSPACE,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *hollowCluster) raiseNoSpace(_ *testing.T, name string) {
	f.c.RaiseAlarm(f.peerURL(name), etcd.AlarmNoSpace)
}
