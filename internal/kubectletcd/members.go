package kubectletcd

import (
	"context"
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
	var output string
	c := &cobra.Command{
		Use:   "members",
		Short: "List etcd's members: ID, name, peer and client URLs, learner",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output); err != nil {
				return err
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				_, list, err := s.members(ctx)
				if err != nil {
					return err
				}
				return membersTable(list).print(cmd.OutOrStdout(), output)
			})
		},
	}
	outputFlag(c, &output)
	return c
}

func membersTable(list *etcd.MemberList) table {
	rows := make([]MemberRow, 0, len(list.Members))
	t := table{header: []string{"ID", "NAME", "PEER URLS", "CLIENT URLS", "LEARNER"}}
	for _, m := range list.Members {
		r := MemberRow{ID: etcd.FormatID(m.ID), Name: m.Name, PeerURLs: nonNil(m.PeerURLs), ClientURLs: nonNil(m.ClientURLs), IsLearner: m.IsLearner}
		rows = append(rows, r)
		t.rows = append(t.rows, []string{r.ID, orDash(r.Name), orDash(strings.Join(r.PeerURLs, ",")), orDash(strings.Join(r.ClientURLs, ",")), yesNo(r.IsLearner)})
	}
	t.value = rows
	return t
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
