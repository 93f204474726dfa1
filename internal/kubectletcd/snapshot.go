package kubectletcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// SnapshotResult says what `snapshot` wrote.
type SnapshotResult struct {
	Member string `json:"member"`
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
}

func (a *app) snapshotCommand() *cobra.Command {
	timeout := 5 * time.Minute
	c := &cobra.Command{
		Use:   "snapshot PATH",
		Short: "Save a snapshot of the -p member, or of the -c cluster's leader, to a local file",
		Long: `Stream a snapshot of a member's backend into PATH (written as PATH.part first and
renamed once complete and its checksum verified). With -c the leader is
asked. The file is what etcdutl snapshot status and snapshot restore read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSession(cmd, func(ctx context.Context, s *session) error {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				p := a.progressTo(cmd.ErrOrStderr())
				r, err := s.snapshot(ctx, args[0], p)
				p.clear()
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Saved a snapshot of member %s to %s: %s (%d bytes), checksum verified.\n",
					r.Member, r.Path, bytesIEC(r.Bytes), r.Bytes)
				return nil
			})
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", timeout, "how long the snapshot may take")
	return c
}

func (s *session) snapshot(ctx context.Context, path string, p *progress) (SnapshotResult, error) {
	source, err := s.snapshotSource(ctx)
	if err != nil {
		return SnapshotResult{}, err
	}
	res := SnapshotResult{Member: source.name(), Path: path}
	rc, err := source.Conn.client.Snapshot(ctx)
	if err != nil {
		return res, fmt.Errorf("snapshot of %s: %w", source.name(), s.explain(err))
	}
	defer func() { _ = rc.Close() }()
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".part*")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	sum := &trailingChecksum{h: sha256.New()}
	expected := source.Status.DBSize
	counter := &countingWriter{onWrite: func(n int64) {
		p.tick("Saving a snapshot of %s: %s of about %s (%s)", source.name(), bytesIEC(n), bytesIEC(expected), percent(n, expected))
	}}
	_, err = io.Copy(io.MultiWriter(f, sum, counter), rc)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("snapshot of %s: %w", source.name(), s.explain(err))
	}
	if !sum.ok() {
		return res, fmt.Errorf("snapshot of %s: the stream ended without its sha256 checksum matching; nothing written", source.name())
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return res, err
	}
	res.Bytes = counter.n
	return res, nil
}

// snapshotSource is the -p member, or the cluster's leader.
func (s *session) snapshotSource(ctx context.Context) (*memberState, error) {
	_, list, err := s.members(ctx)
	if err != nil {
		return nil, err
	}
	states := s.survey(ctx, list)
	want := leaderOf(states)
	if s.pod != nil {
		want = s.podID
	}
	st := stateOf(states, want)
	switch {
	case want == 0:
		return nil, errors.New("no member follows a leader: the cluster has no quorum now; take the snapshot of one member with -p")
	case st == nil:
		return nil, fmt.Errorf("member %s is not in etcd's member list as read a moment ago: try again", etcd.FormatID(want))
	case st.Status == nil:
		return nil, fmt.Errorf("cannot read member %s: %w", st.name(), st.Err)
	}
	return st, nil
}

type countingWriter struct {
	n       int64
	onWrite func(int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.onWrite(c.n)
	return len(p), nil
}

// trailingChecksum checks etcd's snapshot stream: the backend file followed
// by the sha256 of it.
type trailingChecksum struct {
	h    hash.Hash
	tail []byte
}

func (t *trailingChecksum) Write(p []byte) (int, error) {
	t.tail = append(t.tail, p...)
	if over := len(t.tail) - sha256.Size; over > 0 {
		t.h.Write(t.tail[:over])
		t.tail = append(t.tail[:0], t.tail[over:]...)
	}
	return len(p), nil
}

func (t *trailingChecksum) ok() bool {
	return len(t.tail) == sha256.Size && bytes.Equal(t.h.Sum(nil), t.tail)
}
