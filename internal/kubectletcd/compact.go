package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func (a *app) compactCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "compact",
		Short: "Discard the key history before the current revision (cluster-wide)",
		Long: `Compact the keyspace to its current revision: older revisions of every key are
dropped on every member (compaction goes through raft). The space is reused by
new writes; defrag returns it to the file system.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				primary, _, err := s.members(ctx)
				if err != nil {
					return err
				}
				rev, err := timed(ctx, time.Minute, func(ctx context.Context) (int64, error) {
					return primary.client.Compact(ctx, primary.endpoint)
				})
				if errors.Is(err, etcd.ErrCompacted) {
					fmt.Fprintf(cmd.OutOrStdout(), "Already compacted at revision %d.\n", rev)
					return nil
				}
				if err != nil {
					return s.explain(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Compacted to revision %d.\n", rev)
				return nil
			})
		},
	}
}
