package kubectletcd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// StatusRow is one member in `status`.
type StatusRow struct {
	ID               string   `json:"id"`
	Name             string   `json:"name"`
	Endpoint         string   `json:"endpoint"`
	PeerURLs         []string `json:"peerURLs,omitempty"`
	Pod              string   `json:"pod,omitempty"`
	Node             string   `json:"node,omitempty"`
	DBSize           int64    `json:"dbSize"`
	DBSizeInUse      int64    `json:"dbSizeInUse"`
	IsLeader         bool     `json:"isLeader"`
	Leader           string   `json:"leader,omitempty"`
	RaftTerm         uint64   `json:"raftTerm"`
	RaftIndex        uint64   `json:"raftIndex"`
	RaftAppliedIndex uint64   `json:"raftAppliedIndex"`
	IsLearner        bool     `json:"isLearner"`
	Alarms           []string `json:"alarms,omitempty"`
	Version          string   `json:"version,omitempty"`
	Errors           []string `json:"errors,omitempty"`
	// Unreachable says why the member could not be read.
	Unreachable string `json:"unreachable,omitempty"`
	// NotMember marks a Pod of the cluster that etcd does not list: a
	// member joining, or one removed whose Pod is still there.
	NotMember bool `json:"notMember,omitempty"`
}

func (a *app) statusCommand() *cobra.Command {
	var output *outputFlags
	var all bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show each member's status: DB size and use, leader, raft term and index, learner, alarms, version",
		Long: `Show the status of the -p Pod's member, or of every member of the -c cluster in
one table. Exits 1 when a member could not be read (its row says why).
-o wide adds each member's peer URLs, the leader it follows, its Pod and node.

With -A, show every EtcdCluster of every namespace, one line each, from what
the operator reports in the API (no member is dialled): Available, ready
members of the desired, version, what it is doing, the age of its last
complete snapshot, and etcd's alarms. Exits 1 when a cluster is not
Available.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			if all {
				return a.fleetStatus(cmd, output)
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				rows, err := s.status(ctx)
				if err != nil {
					return err
				}
				if err := output.print(cmd.OutOrStdout(), newMemberStatusList(rows), statusTable(rows)); err != nil {
					return err
				}
				return unreadable(rows)
			})
		},
	}
	output = addOutputFlags(c)
	c.Flags().BoolVarP(&all, "all-namespaces", "A", false, "one line per EtcdCluster of every namespace (not with -p or -c)")
	return c
}

// fleetStatus is `status -A`.
func (a *app) fleetStatus(cmd *cobra.Command, output *outputFlags) error {
	if a.opts.Pod != "" || a.opts.Cluster != "" {
		return usageError("-A/--all-namespaces shows every cluster: leave out -p/--pod and -c/--cluster")
	}
	d, err := a.connect()
	if err != nil {
		return err
	}
	rows, err := fleet(cmd.Context(), d.kube)
	if err != nil {
		return err
	}
	list := &ClusterStatusList{TypeMeta: resultType("ClusterStatusList"), Items: nonNil(rows)}
	if err := output.print(cmd.OutOrStdout(), list, fleetTable(rows, time.Now())); err != nil {
		return err
	}
	return unavailable(rows)
}

// status reads the target's members: the -p Pod's own, or every member etcd
// lists plus every Pod of the cluster etcd does not list.
func (s *session) status(ctx context.Context) ([]StatusRow, error) {
	primary, list, err := s.members(ctx)
	if err != nil {
		return nil, err
	}
	alarms, err := timed(ctx, callTimeout, primary.client.AlarmList)
	if err != nil {
		return nil, s.explain(err)
	}
	var states []*memberState
	if s.pod != nil {
		st := &memberState{Pod: s.pod, Conn: primary}
		st.Status, st.Err = timed(ctx, callTimeout, func(ctx context.Context) (*etcd.Status, error) {
			return primary.client.Status(ctx, primary.endpoint)
		})
		if st.Err != nil {
			return nil, s.explain(st.Err)
		}
		st.Member = etcd.Member{ID: st.Status.MemberID, Name: s.pod.Name}
		if m := findMember(list, st.Status.MemberID); m != nil {
			st.Member = *m
		}
		states = []*memberState{st}
	} else {
		states = s.survey(ctx, list)
	}
	rows := make([]StatusRow, 0, len(states))
	for _, st := range states {
		rows = append(rows, statusRow(st, alarms))
	}
	if s.pod == nil {
		rows = append(rows, s.unlistedPods(list)...)
	}
	return rows, nil
}

func statusRow(st *memberState, alarms []etcd.Alarm) StatusRow {
	r := StatusRow{ID: etcd.FormatID(st.Member.ID), Name: st.Member.Name, PeerURLs: st.Member.PeerURLs, IsLearner: st.Member.IsLearner}
	if st.Pod != nil {
		r.Pod, r.Node = st.Pod.Name, st.Pod.Spec.NodeName
	}
	if len(st.Member.ClientURLs) > 0 {
		r.Endpoint = st.Member.ClientURLs[0]
	} else if st.Conn != nil {
		r.Endpoint = st.Conn.url
	}
	for _, a := range alarms {
		if a.MemberID == st.Member.ID {
			r.Alarms = append(r.Alarms, a.Type)
		}
	}
	if st.Err != nil {
		r.Unreachable = st.Err.Error()
		return r
	}
	s := st.Status
	r.DBSize, r.DBSizeInUse = s.DBSize, s.DBSizeInUse
	r.IsLeader = s.Leader != 0 && s.Leader == s.MemberID
	if s.Leader != 0 {
		r.Leader = etcd.FormatID(s.Leader)
	}
	r.RaftTerm, r.RaftIndex, r.RaftAppliedIndex = s.RaftTerm, s.RaftIndex, s.RaftAppliedIndex
	r.IsLearner = s.IsLearner
	r.Version = s.Version
	r.Errors = s.Errors
	return r
}

// unlistedPods are rows for the cluster's Pods that etcd does not list: a
// member whose join has not happened, or one etcd removed. Pods on their way
// out are left out.
func (s *session) unlistedPods(list *etcd.MemberList) []StatusRow {
	var out []StatusRow
	for name, p := range s.pods {
		if p.DeletionTimestamp != nil || slices.ContainsFunc(list.Members, func(m etcd.Member) bool { return m.Name == name }) {
			continue
		}
		out = append(out, StatusRow{ID: "-", Name: name, Endpoint: advertisedClientURL(p, s.sec.TLS != nil), Pod: name, Node: p.Spec.NodeName, NotMember: true})
	}
	slices.SortFunc(out, func(a, b StatusRow) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func findMember(list *etcd.MemberList, id uint64) *etcd.Member {
	for i := range list.Members {
		if list.Members[i].ID == id {
			return &list.Members[i]
		}
	}
	return nil
}

// statusTable is the human form of rows; wide adds the peer URLs, the
// leader each member follows, its Pod and node.
func statusTable(rows []StatusRow) func(wide bool) table {
	return func(wide bool) table {
		t := table{header: []string{"ID", "NAME", "ENDPOINT", "DB SIZE", "IN USE", "LEADER", "RAFT TERM", "RAFT INDEX", "APPLIED", "LEARNER", "ALARMS", "VERSION", "ERRORS"}}
		if wide {
			t.header = append(t.header, "PEER URLS", "LEADER ID", "POD", "NODE")
		}
		for _, r := range rows {
			row := statusCells(r)
			if wide {
				row = append(row, orDash(strings.Join(r.PeerURLs, ",")), orDash(r.Leader), orDash(r.Pod), orDash(r.Node))
			}
			t.rows = append(t.rows, row)
		}
		return t
	}
}

func statusCells(r StatusRow) []string {
	if r.Unreachable != "" || r.NotMember {
		why := r.Unreachable
		if r.NotMember {
			why = "not in etcd's member list"
		}
		return []string{r.ID, orDash(r.Name), orDash(r.Endpoint), "-", "-", "-", "-", "-", "-", yesNo(r.IsLearner), orDash(strings.Join(r.Alarms, ",")), "-", why}
	}
	return []string{
		r.ID, orDash(r.Name), orDash(r.Endpoint), bytesIEC(r.DBSize),
		fmt.Sprintf("%s (%s)", bytesIEC(r.DBSizeInUse), percent(r.DBSizeInUse, r.DBSize)),
		yesNo(r.IsLeader), strconv.FormatUint(r.RaftTerm, 10), strconv.FormatUint(r.RaftIndex, 10),
		strconv.FormatUint(r.RaftAppliedIndex, 10), yesNo(r.IsLearner), orDash(strings.Join(r.Alarms, ",")),
		orDash(r.Version), orDash(strings.Join(r.Errors, "; ")),
	}
}

// unreadable fails the command when a member etcd lists could not be read.
func unreadable(rows []StatusRow) error {
	n, members := 0, 0
	for _, r := range rows {
		if !r.NotMember {
			members++
		}
		if r.Unreachable != "" {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d members could not be read", n, members)
	}
	return nil
}
