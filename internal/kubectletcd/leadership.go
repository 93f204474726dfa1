package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func (a *app) forfeitLeadershipCommand() *cobra.Command {
	var to string
	c := &cobra.Command{
		Use:   "forfeit-leadership",
		Short: "Hand the leadership to another voter (with -p: only if that Pod leads)",
		Long: `Move the raft leadership away from the current leader to the healthy voter with
the most applied entries, or to the member named with --to. With -p, nothing
happens unless the Pod's member is the leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				msg, err := s.forfeit(ctx, to)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), msg)
				return nil
			})
		},
	}
	c.Flags().StringVar(&to, "to", "", "member (name or hex ID) to hand the leadership to")
	return c
}

func (s *session) forfeit(ctx context.Context, to string) (string, error) {
	_, list, err := s.members(ctx)
	if err != nil {
		return "", err
	}
	states := s.survey(ctx, list)
	leader := leaderOf(states)
	if leader == 0 {
		return "", errors.New("no member follows a leader: the cluster has no quorum now")
	}
	ls := stateOf(states, leader)
	if s.pod != nil && s.podID != leader {
		return fmt.Sprintf("%s is not the leader (%s is): nothing to do.", s.pod.Name, nameOf(ls, leader)), nil
	}
	if ls == nil {
		return "", fmt.Errorf("the leader %s is not in etcd's member list as read a moment ago: try again", etcd.FormatID(leader))
	}
	if ls.Conn == nil || ls.Status == nil {
		return "", fmt.Errorf("cannot reach the leader %s: %w", ls.name(), ls.Err)
	}
	target, err := transferee(states, leader, to)
	if err != nil || target == nil {
		if target == nil && err == nil {
			return fmt.Sprintf("%s leads and no other voter could take over: nothing to do.", ls.name()), nil
		}
		return "", err
	}
	// etcd takes a leadership transfer only from the leader itself.
	_, err = timed(ctx, callTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, ls.Conn.client.MoveLeader(ctx, target.Member.ID)
	})
	if err != nil {
		return "", fmt.Errorf("moving the leadership from %s to %s: %w", ls.name(), target.name(), s.explain(err))
	}
	return fmt.Sprintf("Leadership moved from %s to %s.", ls.name(), target.name()), nil
}

// transferee picks who takes the leadership: the member asked for, or the
// healthy voter with the most applied entries. nil, nil: no other voter.
func transferee(states []*memberState, leader uint64, to string) (*memberState, error) {
	if to != "" {
		return namedTransferee(states, leader, to)
	}
	var best *memberState
	others := 0
	for _, st := range states {
		if st.Member.IsLearner || st.Member.ID == leader {
			continue
		}
		others++
		if st.healthy() && (best == nil || st.Status.RaftAppliedIndex > best.Status.RaftAppliedIndex ||
			(st.Status.RaftAppliedIndex == best.Status.RaftAppliedIndex && st.name() < best.name())) {
			best = st
		}
	}
	if best == nil && others > 0 {
		return nil, errors.New("no other voter is healthy enough to take the leadership")
	}
	return best, nil
}

func namedTransferee(states []*memberState, leader uint64, to string) (*memberState, error) {
	i := slices.IndexFunc(states, func(st *memberState) bool { return matches(st.Member, to) })
	if i < 0 {
		return nil, fmt.Errorf("no member %s (kubectl etcd members lists them)", to)
	}
	st := states[i]
	switch {
	case st.Member.IsLearner || st.Member.ID == leader:
		return nil, fmt.Errorf("%s cannot take the leadership: it is a learner or the leader already", to)
	case !st.healthy():
		return nil, fmt.Errorf("%s cannot take the leadership: %s", to, unhealthyWhy(st))
	}
	return st, nil
}

func unhealthyWhy(st *memberState) string {
	if st.Err != nil {
		return st.Err.Error()
	}
	return "it follows no leader"
}

// matches: a member given by name or by hex ID.
func matches(m etcd.Member, s string) bool {
	if m.Name != "" && m.Name == s {
		return true
	}
	id, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	return err == nil && id != 0 && id == m.ID
}

func nameOf(st *memberState, id uint64) string {
	if st != nil {
		return st.name()
	}
	return etcd.FormatID(id)
}
