package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Maintenance adds the day-two calls of the kubectl plugin to Client. The
// operator itself never makes them; they live apart so that the operator's
// interface (and its fake) stay as narrow as the controllers need.
// (Defragment and the alarm calls are in Client: the defrag controller
// makes them.)
type Maintenance interface {
	Client
	// MemberAdd adds a voting member that has not started yet.
	MemberAdd(ctx context.Context, peerURLs []string) (*Member, error)
	// Compact discards the key history before the current revision, read
	// from endpoint, and waits until the backend has dropped it. It returns
	// that revision.
	Compact(ctx context.Context, endpoint string) (int64, error)
	// Snapshot streams the backend of the member the client is connected
	// to; dial a single endpoint to choose it.
	Snapshot(ctx context.Context) (io.ReadCloser, error)
}

// Alarm is an alarm a member raised: NOSPACE when its backend reached the
// quota, CORRUPT when its data disagrees with the others.
type Alarm struct {
	MemberID uint64
	Type     string
}

// ErrCompacted: the revision asked for was compacted away already.
var ErrCompacted = errors.New("etcd: revision already compacted")

// DialMaintenance opens a real client with the day-two calls.
func DialMaintenance(ctx context.Context, cfg Config) (Maintenance, error) {
	c, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return c.(*client), nil
}

var _ Maintenance = (*client)(nil)

func (c *client) MemberAdd(ctx context.Context, peerURLs []string) (*Member, error) {
	resp, err := c.c.MemberAdd(ctx, peerURLs)
	if err != nil {
		return nil, classify(err)
	}
	m := member(resp.Member.ID, resp.Member.Name, resp.Member.PeerURLs, resp.Member.ClientURLs, false)
	return &m, nil
}

func (c *client) Defragment(ctx context.Context, endpoint string) error {
	_, err := c.c.Defragment(ctx, endpoint)
	return classify(err)
}

func (c *client) Compact(ctx context.Context, endpoint string) (int64, error) {
	st, err := c.c.Status(ctx, endpoint)
	if err != nil {
		return 0, classify(err)
	}
	rev := st.Header.Revision
	if _, err := c.c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return rev, fmt.Errorf("%w: %d", ErrCompacted, rev)
		}
		return 0, classify(err)
	}
	return rev, nil
}

func (c *client) AlarmList(ctx context.Context) ([]Alarm, error) {
	resp, err := c.c.AlarmList(ctx)
	if err != nil {
		return nil, classify(err)
	}
	return alarms(resp.Alarms), nil
}

func (c *client) AlarmDisarm(ctx context.Context, a Alarm) ([]Alarm, error) {
	am := &clientv3.AlarmMember{MemberID: a.MemberID}
	if a.Type != "" {
		t, ok := etcdserverpb.AlarmType_value[a.Type]
		if !ok {
			return nil, fmt.Errorf("unknown alarm type %q", a.Type)
		}
		am.Alarm = etcdserverpb.AlarmType(t)
	}
	resp, err := c.c.AlarmDisarm(ctx, am)
	if err != nil {
		return nil, classify(err)
	}
	return alarms(resp.Alarms), nil
}

func (c *client) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	rc, err := c.c.Snapshot(ctx)
	if err != nil {
		return nil, classify(err)
	}
	return classifyingReader{rc}, nil
}

// classifyingReader classifies the errors of a stream, which etcd sends
// with the first chunk (permission denied, say), not with the call.
type classifyingReader struct{ io.ReadCloser }

func (r classifyingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = classify(err)
	}
	return n, err
}

func alarms(in []*etcdserverpb.AlarmMember) []Alarm {
	out := make([]Alarm, 0, len(in))
	for _, a := range in {
		out = append(out, Alarm{MemberID: a.MemberID, Type: a.Alarm.String()})
	}
	return out
}

// rootUser is the user, and the role, that etcd lets do everything.
const rootUser = "root"

// RootRoles returns the roles root holds (none when there is no root).
func (c *client) RootRoles(ctx context.Context) ([]string, error) {
	u, err := c.c.UserGet(ctx, rootUser)
	switch {
	case errors.Is(err, rpctypes.ErrUserNotFound):
		return nil, nil
	case err != nil:
		return nil, classify(fmt.Errorf("reading user %s: %w", rootUser, err))
	}
	return u.Roles, nil
}

// GiveRootAPassword makes root a user that logs in with this password and
// holds the root role, the given roles and any role it holds now. etcd
// keeps a user created without a password (authenticated by its client
// certificate alone) so for good: it neither sets a password on it nor
// deletes root while authentication is on. So authentication is switched
// off, root deleted and added back with the password, granted its roles
// and authentication switched on again: a window of a few round trips in
// which etcd checks no credentials, and after which every token must be
// renewed (clients authenticated by certificate are not affected). Every
// step tolerates having been done, so a call that died half-way is
// finished by the next; a call that died after deleting root has lost the
// roles root held, so the caller reads them first (RootRoles), keeps them
// where a crash does not reach, and passes them. The client must be root.
func (c *client) GiveRootAPassword(ctx context.Context, password string, roles []string) error {
	on, err := c.AuthEnabled(ctx)
	if err != nil {
		return err
	}
	if on {
		if _, err := c.c.AuthDisable(ctx); err != nil {
			return classify(fmt.Errorf("switching authentication off: %w", err))
		}
	}
	held, err := c.RootRoles(ctx)
	if err != nil {
		return err
	}
	grant := []string{rootUser}
	for _, r := range append(slices.Clone(roles), held...) {
		if !slices.Contains(grant, r) {
			grant = append(grant, r)
		}
	}
	if _, err := c.c.UserDelete(ctx, rootUser); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return classify(fmt.Errorf("deleting user %s: %w", rootUser, err))
	}
	if _, err := c.c.UserAdd(ctx, rootUser, password); err != nil {
		return classify(fmt.Errorf("adding user %s: %w", rootUser, err))
	}
	if _, err := c.c.RoleAdd(ctx, rootUser); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return classify(fmt.Errorf("adding role %s: %w", rootUser, err))
	}
	for _, r := range grant {
		if _, err := c.c.UserGrantRole(ctx, rootUser, r); err != nil {
			return classify(fmt.Errorf("granting role %s to %s: %w", r, rootUser, err))
		}
	}
	if _, err := c.c.AuthEnable(ctx); err != nil {
		return classify(fmt.Errorf("switching authentication on: %w", err))
	}
	return nil
}
