package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

const forceHelp = "do it even if the quorum projection forbids it"

func (a *app) leaveCommand() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "leave",
		Short: "Remove the -p Pod's member from etcd's membership",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.opts.Pod == "" {
				return usageError("leave removes the member of the Pod given with -p/--pod; to remove any member use remove-member")
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				return s.remove(ctx, cmd, "", force)
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, forceHelp)
	return c
}

func (a *app) removeMemberCommand() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "remove-member ID|NAME",
		Short: "Remove a member (by hex ID or name) from etcd's membership",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				return s.remove(ctx, cmd, args[0], force)
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, forceHelp)
	return c
}

// remove takes a member out of etcd's membership, the -p Pod's own when who
// is empty, if the voters that stay keep a quorum.
func (s *session) remove(ctx context.Context, cmd *cobra.Command, who string, force bool) error {
	primary, list, err := s.members(ctx)
	if err != nil {
		return err
	}
	var m *etcd.Member
	if who == "" {
		m = findMember(list, s.podID)
	} else if i := slices.IndexFunc(list.Members, func(m etcd.Member) bool { return matches(m, who) }); i >= 0 {
		m = &list.Members[i]
	}
	if m == nil {
		return fmt.Errorf("etcd lists no member %s (kubectl etcd members lists them)", orDash(who))
	}
	name := memberName(*m)
	states := s.survey(ctx, list)
	if !force {
		if d := quorum.Remove(votersOf(states), name); !d.OK {
			return fmt.Errorf("refusing: %s (--force to do it anyway)", d.Reason)
		}
	}
	// A member that removes itself stops before it answers: ask another.
	via := primary
	if i := slices.IndexFunc(states, func(st *memberState) bool { return st.Member.ID != m.ID && st.healthy() }); i >= 0 {
		via = states[i].Conn
	}
	err = s.change(ctx, cmd, "removing "+name, func(ctx context.Context) error { return via.client.MemberRemove(ctx, m.ID) })
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Removed member %s from cluster %s.\n", describe(*m), etcd.FormatID(list.ClusterID))
	s.noteOperator(cmd.ErrOrStderr(), "it replaces a member etcd no longer lists with a new one")
	return nil
}

type addOptions struct {
	voter bool
	force bool
	name  string
}

func (a *app) addMemberCommand() *cobra.Command {
	var opts addOptions
	c := &cobra.Command{
		Use:   "add-member PEER_URL",
		Short: "Add a member, as a learner unless --voter",
		Long: `Add a member with the given peer URL, as a non-voting learner unless --voter.
A learner catches up without counting for quorum; promote it with
promote-member once it has. Adding a voter that has not started yet counts as
an unhealthy voter at once: it is refused when the healthy voters would not be
a quorum of the new membership, unless --force.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPeerURL(args[0]); err != nil {
				return err
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				return s.add(ctx, cmd, args[0], opts)
			})
		},
	}
	c.Flags().BoolVar(&opts.voter, "voter", false, "add a voting member instead of a learner")
	c.Flags().BoolVar(&opts.force, "force", false, forceHelp)
	c.Flags().StringVar(&opts.name, "name", "", "the new member's name, for the flags printed to start it with")
	return c
}

func checkPeerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" {
		return usageError(fmt.Sprintf("%q is not a peer URL: want http(s)://HOST:PORT", s))
	}
	return nil
}

func (s *session) add(ctx context.Context, cmd *cobra.Command, peerURL string, opts addOptions) error {
	primary, list, err := s.members(ctx)
	if err != nil {
		return err
	}
	if !opts.force {
		voters := votersOf(s.survey(ctx, list))
		d := quorum.AddLearner(voters)
		if opts.voter {
			// A voter that has not started is an unhealthy voter.
			d = quorum.Promote(voters, peerURL, false)
		}
		if !d.OK {
			return fmt.Errorf("refusing: %s (--force to do it anyway)", d.Reason)
		}
	}
	add, kind := primary.client.MemberAddAsLearner, "a learner"
	if opts.voter {
		add, kind = primary.client.MemberAdd, "a voter"
	}
	var m *etcd.Member
	err = s.change(ctx, cmd, "adding "+peerURL, func(ctx context.Context) (err error) {
		m, err = add(ctx, []string{peerURL})
		return err
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Added member %s as %s to cluster %s.\n", etcd.FormatID(m.ID), kind, etcd.FormatID(list.ClusterID))
	name := opts.name
	if name == "" {
		name = "NAME"
	}
	peers := map[string]string{name: peerURL}
	for _, e := range list.Members {
		if e.Name != "" && len(e.PeerURLs) > 0 {
			peers[e.Name] = e.PeerURLs[0]
		}
	}
	fmt.Fprintf(out, "Start it with:\n  --name=%s --initial-advertise-peer-urls=%s --initial-cluster=%s --initial-cluster-state=existing\n",
		name, peerURL, manifest.InitialCluster(peers))
	s.noteOperator(cmd.ErrOrStderr(), "it removes etcd members no EtcdMember accounts for; scale the EtcdCluster instead")
	return nil
}

func (a *app) promoteMemberCommand() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "promote-member ID|NAME",
		Short: "Promote a learner that has caught up to a voter",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				return s.promote(ctx, cmd, args[0], force)
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, forceHelp)
	return c
}

func (s *session) promote(ctx context.Context, cmd *cobra.Command, who string, force bool) error {
	primary, list, err := s.members(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(list.Members, func(m etcd.Member) bool { return matches(m, who) })
	if i < 0 {
		return fmt.Errorf("etcd lists no member %s (kubectl etcd members lists them)", who)
	}
	m := list.Members[i]
	if !m.IsLearner {
		return fmt.Errorf("%s is a voter already", memberName(m))
	}
	if !force {
		states := s.survey(ctx, list)
		if d := quorum.Promote(votersOf(states), memberName(m), caughtUp(states, m.ID)); !d.OK {
			return fmt.Errorf("refusing: %s (--force to do it anyway)", d.Reason)
		}
	}
	err = s.change(ctx, cmd, "promoting "+memberName(m), func(ctx context.Context) error { return primary.client.MemberPromote(ctx, m.ID) })
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Promoted member %s to a voter.\n", describe(m))
	return nil
}

// changeWait bounds how long a membership change waits for etcd to accept it.
const changeWait = 30 * time.Second

// change makes one membership change, retrying while etcd refuses it for
// now: etcd takes a change only once every voter has been connected for a
// few seconds, and a learner is promoted only once it has caught up.
func (s *session) change(ctx context.Context, cmd *cobra.Command, what string, call func(context.Context) error) error {
	p := s.progress(cmd)
	defer p.clear()
	var err error
	deadline := time.Now().Add(changeWait)
	for {
		_, err = timed(ctx, callTimeout, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
		if !errors.Is(err, etcd.ErrUnhealthy) && !errors.Is(err, etcd.ErrLearnerNotReady) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: etcd still refuses after %s: %w", what, changeWait, err)
		}
		p.show("%s: etcd asks to wait (%v); trying again...", what, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, s.explain(err))
	}
	return nil
}

// describe names a member by name and ID, or by ID alone before it started.
func describe(m etcd.Member) string {
	if m.Name == "" {
		return etcd.FormatID(m.ID)
	}
	return fmt.Sprintf("%s (%s)", m.Name, etcd.FormatID(m.ID))
}

// caughtUp: the learner has applied at least nine tenths of what the leader
// has, the margin etcd itself gives a learner it promotes.
func caughtUp(states []*memberState, learner uint64) bool {
	l, leader := stateOf(states, learner), stateOf(states, leaderOf(states))
	if l == nil || leader == nil || l.Status == nil || leader.Status == nil {
		return false
	}
	return l.Status.RaftAppliedIndex*10 >= leader.Status.RaftAppliedIndex*9
}

// noteOperator tells, on stderr, what the operator will do about a
// membership change made behind its back.
func (s *session) noteOperator(w io.Writer, what string) {
	if s.cluster != nil {
		fmt.Fprintf(w, "Note: etcdcluster %s is run by etcd-operator: %s.\n", s.cluster.Name, what)
	}
}
