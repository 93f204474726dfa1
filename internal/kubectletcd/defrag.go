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
	direct bool
	output *outputFlags
	run    defragRunOptions
}

// Flags that belong to one path only: the operator checks quorum and health
// itself and bounds a run by its own deadline; the EtcdDefrag's settings
// mean nothing to the plugin's own defragmentation.
var (
	directOnlyFlags   = []string{"force", "timeout"}
	resourceOnlyFlags = []string{"name", "wait", "all", "free-space-above", "quota-usage-above", "min-reclaim", "ttl-after-finished"}
)

func (a *app) defragCommand() *cobra.Command {
	opts := defragOptions{settle: time.Minute}
	c := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment the -c cluster through an EtcdDefrag the operator runs, or members directly (--direct, -p)",
		Long: `Defragment backends to return the space compaction freed to the file system.

With -c, the plugin creates an EtcdDefrag for the cluster (named by --name,
or generated as <cluster>-defrag-<suffix>) and follows it until the operator
finishes it: one member at a time, followers first and the leader last after
a leadership hand-over, each only while etcd reports the cluster healthy;
NOSPACE alarms are disarmed at the end. Which members go is the EtcdDefrag's
rule: by default those with more than 200Mi to reclaim; --all takes every
member, as --direct does. On a terminal, stderr shows what the run waits for,
the member being defragmented and each member's outcome as it comes; stdout
gets the outcome of every member at the end (-o json or yaml: the final
EtcdDefrag). The exit code is 0 when the run is Complete and 1 when it
Failed, with its reason and message. --wait=false only creates the
EtcdDefrag and prints its name. Interrupting the plugin does not stop the
run: the operator finishes it.

--direct defragments through the etcd API from here instead, for a cluster
whose operator has no EtcdDefrag: each member goes only while the other
voters hold quorum and the member itself follows a leader; members go one at
a time, learners and followers first and the leader last, each after the one
before follows a leader again. NOSPACE alarms of defragmented members are
disarmed at the end. --force skips the quorum and health checks, --timeout
bounds one member. -p (one member, also of a Pod the operator did not
create) always goes this way: an EtcdDefrag covers a whole cluster.`,
		Example: `  kubectl etcd defrag -c example                    # an EtcdDefrag with the default rule, followed to the end
  kubectl etcd defrag -c example --all --name nightly
  kubectl etcd defrag -c example --wait=false       # then: kubectl get etcddefrag <name> -w
  kubectl etcd defrag -c example --direct           # through the etcd API, every member
  kubectl etcd defrag -p example-abcde              # one member, through the etcd API`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.output.validate(); err != nil {
				return err
			}
			if opts.direct || a.opts.Pod != "" {
				if err := refuseFlags(cmd, resourceOnlyFlags, "applies to the EtcdDefrag the operator runs (-c without --direct)"); err != nil {
					return err
				}
				return a.defragDirect(cmd, opts)
			}
			if err := refuseFlags(cmd, directOnlyFlags, "applies only with --direct: the operator checks quorum and health itself and bounds a run by its own deadline"); err != nil {
				return err
			}
			opts.run.ttlSet = cmd.Flags().Changed("ttl-after-finished")
			return a.defragByResource(cmd, opts.run, opts.output)
		},
	}
	f := c.Flags()
	f.BoolVar(&opts.direct, "direct", false, "defragment through the etcd API from here instead of creating an EtcdDefrag (always so with -p)")
	f.BoolVar(&opts.force, "force", false, "with --direct: defragment even if the quorum projection or the member's health forbids it")
	f.DurationVar(&opts.timeout, "timeout", 2*time.Minute, "with --direct: how long one member's defragmentation may take")
	f.StringVar(&opts.run.name, "name", "", "name of the EtcdDefrag (default: generated, <cluster>-defrag-<suffix>)")
	f.BoolVar(&opts.run.wait, "wait", true, "follow the EtcdDefrag until it ends; --wait=false creates it and returns")
	f.BoolVar(&opts.run.all, "all", false, "defragment every member, whatever it has to reclaim (rule.all)")
	f.StringVar(&opts.run.freeSpaceAbove, "free-space-above", "", "defragment members with more than this to reclaim, such as 100Mi (rule.freeSpaceAbove; the operator's default is 200Mi)")
	f.StringVar(&opts.run.quotaUsageAbove, "quota-usage-above", "", `also defragment members whose database uses more than this share of the quota, such as "80%" (rule.quotaUsageAbove)`)
	f.StringVar(&opts.run.minReclaim, "min-reclaim", "", "with --quota-usage-above: the least to reclaim that makes it worth it, such as 64Mi (rule.minReclaim; default 32Mi)")
	f.DurationVar(&opts.run.ttl, "ttl-after-finished", 0, "delete the EtcdDefrag this long after it ends (ttlSecondsAfterFinished; default: keep it)")
	opts.output = addOutputFlags(c)
	return c
}

// refuseFlags fails when one of names was given: it belongs to the other
// path.
func refuseFlags(cmd *cobra.Command, names []string, why string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return usageError(fmt.Sprintf("--%s %s", n, why))
		}
	}
	return nil
}

// defragDirect defragments through the etcd API: the -p member, or every
// member of the -c cluster.
func (a *app) defragDirect(cmd *cobra.Command, opts defragOptions) error {
	return a.withSession(cmd, func(ctx context.Context, s *session) error {
		p := a.progressTo(cmd.ErrOrStderr())
		results, cleared, members, err := s.defrag(ctx, opts, p)
		p.clear()
		if len(results) > 0 || !opts.output.human() {
			l := &DefragResultList{TypeMeta: resultType("DefragResultList"), Items: nonNil(results)}
			if perr := opts.output.print(cmd.OutOrStdout(), l, l.table); perr != nil {
				return perr
			}
		}
		if err != nil {
			return err
		}
		if len(cleared) > 0 {
			// json, yaml and the rest keep stdout parseable: the note
			// goes to stderr.
			w := cmd.OutOrStdout()
			if !opts.output.human() {
				w = cmd.ErrOrStderr()
			}
			printDisarmedTo(w, cleared, members)
		}
		return nil
	})
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

// table is the human form of the results; wide adds the member IDs.
func (l *DefragResultList) table(wide bool) table {
	t := table{header: []string{"MEMBER", "ROLE", "BEFORE", "AFTER", "TOOK"}}
	if wide {
		t.header = append(t.header, "ID")
	}
	for _, r := range l.Items {
		row := []string{r.Name, r.Role, bytesIEC(r.Before), bytesIEC(r.After), r.Took.String()}
		if wide {
			row = append(row, r.ID)
		}
		t.rows = append(t.rows, row)
	}
	return t
}
