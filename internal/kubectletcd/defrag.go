package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// DefragResult is one defragmented member.
type DefragResult struct {
	ID     string        `json:"id"`
	Name   string        `json:"name"`
	Role   string        `json:"role"`
	Before int64         `json:"dbSizeBefore"`
	After  int64         `json:"dbSizeAfter"`
	Took   time.Duration `json:"took"`
}

type defragOptions struct {
	force   bool
	timeout time.Duration // per member
	// settle bounds the wait for a member to follow a leader again.
	settle time.Duration
}

func (a *app) defragCommand() *cobra.Command {
	opts := defragOptions{settle: time.Minute}
	c := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment the -p member, or every member of the -c cluster one at a time, leader last",
		Long: `Defragment backends to return the space compaction freed to the file system.
A member is blocked while it is defragmented, so each goes only while the other
voters hold quorum and the member itself is healthy; with -c, members go one at
a time, learners and followers first and the leader last, each after the one
before follows a leader again. NOSPACE alarms of defragmented members are
disarmed at the end. --force skips the quorum and health checks.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				p := a.progressTo(cmd.ErrOrStderr())
				results, cleared, members, err := s.defrag(ctx, opts, p)
				p.clear()
				if len(results) > 0 {
					if perr := defragTable(results).print(cmd.OutOrStdout(), formatTable); perr != nil {
						return perr
					}
				}
				if err != nil {
					return err
				}
				if len(cleared) > 0 {
					printDisarmed(cmd, cleared, members)
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&opts.force, "force", false, "defragment even if the quorum projection or the member's health forbids it")
	c.Flags().DurationVar(&opts.timeout, "timeout", 2*time.Minute, "how long one member's defragmentation may take")
	return c
}

// defrag defragments the target's members in order and returns what it did,
// the alarms it disarmed afterwards and the membership.
func (s *session) defrag(ctx context.Context, opts defragOptions, p *progress) ([]DefragResult, []etcd.Alarm, *etcd.MemberList, error) {
	primary, list, err := s.members(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	states := s.survey(ctx, list)
	order, err := s.defragOrder(ctx, states)
	if err != nil {
		return nil, nil, list, err
	}
	var results []DefragResult
	for i, id := range order {
		if i > 0 {
			states = s.survey(ctx, list) // the previous member changed things
		}
		st := stateOf(states, id)
		if err := mayDefrag(states, st, opts.force); err != nil {
			return results, nil, list, err
		}
		role := roleOf(st)
		p.show("Defragmenting %s (%s, %d of %d, %s)...", st.name(), role, i+1, len(order), bytesIEC(st.Status.DBSize))
		r, err := s.defragOne(ctx, st, opts, p)
		if err != nil {
			return results, nil, list, err
		}
		r.Role = role
		results = append(results, r)
	}
	cleared, err := s.disarmNoSpace(ctx, primary, order)
	return results, cleared, list, err
}

// defragOrder: the -p member alone; for a cluster learners, then followers,
// then the leader, so that leadership changes at most once.
func (s *session) defragOrder(ctx context.Context, states []*memberState) ([]uint64, error) {
	if s.pod != nil {
		id, err := s.podMemberID(ctx)
		if err != nil {
			return nil, err
		}
		return []uint64{id}, nil
	}
	leader := leaderOf(states)
	sorted := slices.Clone(states)
	rank := func(st *memberState) int {
		switch {
		case st.Member.IsLearner:
			return 0
		case st.Member.ID == leader:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(sorted, func(a, b *memberState) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.name(), b.name())
	})
	out := make([]uint64, 0, len(sorted))
	for _, st := range sorted {
		out = append(out, st.Member.ID)
	}
	return out, nil
}

// mayDefrag refuses a member that cannot be reached, and, unless forced, one
// that is unhealthy or whose blocking would cost the others their quorum.
func mayDefrag(states []*memberState, st *memberState, force bool) error {
	switch {
	case st == nil:
		return errors.New("the member left etcd's membership meanwhile")
	case st.Status == nil:
		return fmt.Errorf("cannot defragment %s: %w", st.name(), st.Err)
	case force:
		return nil
	case !st.healthy():
		return fmt.Errorf("refusing to defragment %s: it follows no leader (--force to do it anyway)", st.name())
	}
	if d := quorum.Restart(votersOf(states), st.name()); !d.OK {
		return fmt.Errorf("refusing to defragment %s, which blocks it while it runs: %s (--force to do it anyway)", st.name(), d.Reason)
	}
	return nil
}

func roleOf(st *memberState) string {
	switch {
	case st.Member.IsLearner:
		return "learner"
	case st.Status != nil && st.Status.Leader == st.Member.ID:
		return "leader"
	}
	return "follower"
}

func (s *session) defragOne(ctx context.Context, st *memberState, opts defragOptions, p *progress) (DefragResult, error) {
	r := DefragResult{ID: etcd.FormatID(st.Member.ID), Name: st.name(), Before: st.Status.DBSize}
	start := time.Now()
	_, err := timed(ctx, opts.timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, st.Conn.client.Defragment(ctx, st.Conn.endpoint)
	})
	if err != nil {
		return r, fmt.Errorf("defragmenting %s: %w", st.name(), s.explain(err))
	}
	p.show("Defragmented %s; waiting for it to follow a leader...", st.name())
	var after *etcd.Status
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, opts.settle, true, func(ctx context.Context) (bool, error) {
		after, err = timed(ctx, callTimeout, func(ctx context.Context) (*etcd.Status, error) {
			return st.Conn.client.Status(ctx, st.Conn.endpoint)
		})
		return err == nil && after.Leader != 0, nil
	})
	if err != nil {
		return r, fmt.Errorf("%s was defragmented but does not follow a leader within %s: stopping", st.name(), opts.settle)
	}
	r.After, r.Took = after.DBSize, time.Since(start).Round(time.Millisecond)
	return r, nil
}

// disarmNoSpace clears the NOSPACE alarms of the defragmented members: the
// space they ran out of is back. Other alarms (CORRUPT) stay for a person.
func (s *session) disarmNoSpace(ctx context.Context, primary *conn, done []uint64) ([]etcd.Alarm, error) {
	alarms, err := timed(ctx, callTimeout, primary.client.AlarmList)
	if err != nil {
		return nil, fmt.Errorf("defragmented, but listing alarms failed: %w", s.explain(err))
	}
	var cleared []etcd.Alarm
	for _, a := range alarms {
		if a.Type != "NOSPACE" || !slices.Contains(done, a.MemberID) {
			continue
		}
		got, err := timed(ctx, callTimeout, func(ctx context.Context) ([]etcd.Alarm, error) {
			return primary.client.AlarmDisarm(ctx, a)
		})
		if err != nil {
			return cleared, fmt.Errorf("defragmented, but disarming NOSPACE of %s failed: %w", etcd.FormatID(a.MemberID), s.explain(err))
		}
		cleared = append(cleared, got...)
	}
	return cleared, nil
}

func defragTable(results []DefragResult) table {
	t := table{header: []string{"MEMBER", "ROLE", "BEFORE", "AFTER", "TOOK"}, value: results}
	for _, r := range results {
		t.rows = append(t.rows, []string{r.Name, r.Role, bytesIEC(r.Before), bytesIEC(r.After), r.Took.String()})
	}
	return t
}
