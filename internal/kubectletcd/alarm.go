package kubectletcd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// AlarmRow is one alarm in `alarm list`.
type AlarmRow struct {
	MemberID string `json:"memberID"`
	Name     string `json:"name,omitempty"`
	Alarm    string `json:"alarm"`
}

func (a *app) alarmCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "alarm",
		Short: "List or disarm etcd's alarms (NOSPACE, CORRUPT)",
	}
	var output *outputFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the alarms members raised",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				primary, members, err := s.members(ctx)
				if err != nil {
					return err
				}
				alarms, err := timed(ctx, callTimeout, primary.client.AlarmList)
				if err != nil {
					return s.explain(err)
				}
				if len(alarms) == 0 && output.human() {
					fmt.Fprintln(cmd.OutOrStdout(), "No alarm is raised.")
					return nil
				}
				result := alarmList(alarms, members)
				return output.print(cmd.OutOrStdout(), result, result.table)
			})
		},
	}
	output = addOutputFlags(list)
	disarm := &cobra.Command{
		Use:   "disarm",
		Short: "Disarm every alarm (after the cause, a full backend say, is gone)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				primary, members, err := s.members(ctx)
				if err != nil {
					return err
				}
				cleared, err := timed(ctx, callTimeout, func(ctx context.Context) ([]etcd.Alarm, error) {
					return primary.client.AlarmDisarm(ctx, etcd.Alarm{})
				})
				if err != nil {
					return s.explain(err)
				}
				printDisarmed(cmd, cleared, members)
				return nil
			})
		},
	}
	c.AddCommand(list, disarm)
	return c
}

func printDisarmed(cmd *cobra.Command, cleared []etcd.Alarm, members *etcd.MemberList) {
	if len(cleared) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "No alarm to disarm.")
		return
	}
	printDisarmedTo(cmd.OutOrStdout(), cleared, members)
}

func printDisarmedTo(w io.Writer, cleared []etcd.Alarm, members *etcd.MemberList) {
	for _, a := range cleared {
		fmt.Fprintf(w, "Disarmed %s of member %s.\n", a.Type, alarmMemberName(a.MemberID, members))
	}
}

func alarmMemberName(id uint64, members *etcd.MemberList) string {
	if m := findMember(members, id); m != nil && m.Name != "" {
		return fmt.Sprintf("%s (%s)", m.Name, etcd.FormatID(id))
	}
	return etcd.FormatID(id)
}

func alarmList(alarms []etcd.Alarm, members *etcd.MemberList) *AlarmList {
	l := &AlarmList{TypeMeta: resultType("AlarmList"), Items: make([]AlarmRow, 0, len(alarms))}
	for _, a := range alarms {
		r := AlarmRow{MemberID: etcd.FormatID(a.MemberID), Alarm: a.Type}
		if m := findMember(members, a.MemberID); m != nil {
			r.Name = m.Name
		}
		l.Items = append(l.Items, r)
	}
	return l
}

// table is the human form of the alarms; wide has nothing to add.
func (l *AlarmList) table(bool) table {
	t := table{header: []string{"MEMBER ID", "NAME", "ALARM"}}
	for _, r := range l.Items {
		t.rows = append(t.rows, []string{r.MemberID, orDash(r.Name), r.Alarm})
	}
	return t
}
