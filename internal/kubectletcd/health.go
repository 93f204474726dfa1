package kubectletcd

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// memberState is one etcd member as seen through its own Pod right now.
type memberState struct {
	Member etcd.Member
	Pod    *corev1.Pod
	Conn   *conn
	Status *etcd.Status
	Err    error // why the member could not be read
}

// healthy: the member answers and follows a leader.
func (m *memberState) healthy() bool {
	return m.Err == nil && m.Status != nil && m.Status.Leader != 0
}

func (m *memberState) name() string { return memberName(m.Member) }

func memberName(m etcd.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return etcd.FormatID(m.ID)
}

// survey asks every member of the list about itself, each through its own
// Pod, in parallel.
func (s *session) survey(ctx context.Context, list *etcd.MemberList) []*memberState {
	out := make([]*memberState, len(list.Members))
	var wg sync.WaitGroup
	for i, m := range list.Members {
		out[i] = &memberState{Member: m}
		wg.Add(1)
		go func(st *memberState) {
			defer wg.Done()
			s.read(ctx, st)
		}(out[i])
	}
	wg.Wait()
	return out
}

func (s *session) read(ctx context.Context, st *memberState) {
	if s.pod != nil && st.Member.ID == s.podID {
		st.Pod = s.pod
	} else if st.Pod, st.Err = s.podOf(ctx, st.Member.Name); st.Err != nil {
		return
	}
	if st.Conn, st.Err = s.connect(ctx, st.Pod); st.Err != nil {
		return
	}
	st.Status, st.Err = timed(ctx, callTimeout, func(ctx context.Context) (*etcd.Status, error) {
		return st.Conn.client.Status(ctx, st.Conn.endpoint)
	})
	st.Err = s.explain(st.Err)
	if st.Err == nil && st.Status.MemberID != st.Member.ID {
		st.Err = errors.New("pod " + st.Pod.Name + " answers as member " + etcd.FormatID(st.Status.MemberID) + ", not as " + etcd.FormatID(st.Member.ID))
		st.Status = nil
	}
}

// votersOf projects the surveyed members onto the quorum package's voters.
func votersOf(states []*memberState) []quorum.Voter {
	var out []quorum.Voter
	for _, st := range states {
		if !st.Member.IsLearner {
			out = append(out, quorum.Voter{Name: st.name(), Healthy: st.healthy()})
		}
	}
	return out
}

// leaderOf returns the leader as most members see it, 0 if none.
func leaderOf(states []*memberState) uint64 {
	votes := map[uint64]int{}
	var best uint64
	for _, st := range states {
		if st.Status != nil && st.Status.Leader != 0 {
			votes[st.Status.Leader]++
			if votes[st.Status.Leader] > votes[best] {
				best = st.Status.Leader
			}
		}
	}
	return best
}

func stateOf(states []*memberState, id uint64) *memberState {
	for _, st := range states {
		if st.Member.ID == id {
			return st
		}
	}
	return nil
}
