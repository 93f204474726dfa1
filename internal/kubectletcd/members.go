package kubectletcd

import (
	"context"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// MemberRow is one member in `members`.
type MemberRow struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

func (a *app) membersCommand() *cobra.Command {
	var output *outputFlags
	c := &cobra.Command{
		Use:   "members",
		Short: "List etcd's members: ID, name, peer and client URLs, learner",
		Long: `List etcd's members: ID, name, peer and client URLs, learner. -o wide also
asks each member for its status (one port-forward each, as status does) and
adds its leadership, version, DB size, raft term and index; a member that
does not answer shows - there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				_, list, err := s.members(ctx)
				if err != nil {
					return err
				}
				var states []*memberState
				if output.wide() {
					states = s.survey(ctx, list)
				}
				return output.print(cmd.OutOrStdout(), memberList(list), membersTable(list, states))
			})
		},
	}
	output = addOutputFlags(c)
	return c
}

func memberList(list *etcd.MemberList) *MemberList {
	l := &MemberList{TypeMeta: resultType("MemberList"), Items: make([]MemberRow, 0, len(list.Members))}
	for _, m := range list.Members {
		l.Items = append(l.Items, MemberRow{ID: etcd.FormatID(m.ID), Name: m.Name, PeerURLs: nonNil(m.PeerURLs), ClientURLs: nonNil(m.ClientURLs), IsLearner: m.IsLearner})
	}
	return l
}

// membersTable is the human form of the membership; wide adds what each
// member's status says (states, in the order of list.Members).
func membersTable(list *etcd.MemberList, states []*memberState) func(wide bool) table {
	return func(wide bool) table {
		t := table{header: []string{"ID", "NAME", "PEER URLS", "CLIENT URLS", "LEARNER"}}
		if wide {
			t.header = append(t.header, "LEADER", "VERSION", "DB SIZE", "RAFT TERM", "RAFT INDEX")
		}
		for i, m := range list.Members {
			row := []string{etcd.FormatID(m.ID), orDash(m.Name), orDash(strings.Join(m.PeerURLs, ",")), orDash(strings.Join(m.ClientURLs, ",")), yesNo(m.IsLearner)}
			if wide {
				var st *memberState
				if i < len(states) {
					st = states[i]
				}
				row = append(row, memberStatusCells(st)...)
			}
			t.rows = append(t.rows, row)
		}
		return t
	}
}

func memberStatusCells(st *memberState) []string {
	if st == nil || st.Status == nil {
		return []string{"-", "-", "-", "-", "-"}
	}
	s := st.Status
	return []string{
		yesNo(s.Leader != 0 && s.Leader == s.MemberID), orDash(s.Version), bytesIEC(s.DBSize),
		strconv.FormatUint(s.RaftTerm, 10), strconv.FormatUint(s.RaftIndex, 10),
	}
}
