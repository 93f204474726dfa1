package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Dial opens a real client. Connections are made lazily: an unreachable
// cluster shows as an error of the first call, bounded by that call's context.
func Dial(ctx context.Context, cfg Config) (Client, error) {
	timeout := cfg.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	var opts []grpc.DialOption
	if cfg.Resolve != nil {
		opts = append(opts, grpc.WithContextDialer(ResolvingDialer(cfg.Resolve)))
	}
	var token string
	if cfg.Username != "" {
		var err error
		lctx, cancel := context.WithTimeout(ctx, 2*timeout)
		token, err = Login(lctx, cfg, authenticate(cfg, opts))
		cancel()
		if err != nil {
			return nil, err
		}
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		Token:       token,
		DialTimeout: timeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
		DialOptions: opts,
	})
	if err != nil {
		return nil, classify(fmt.Errorf("connecting to %v: %w", cfg.Endpoints, err))
	}
	return &client{c: c, cfg: cfg}, nil
}

// ResolvingDialer connects to the address resolve knows for a host, and to
// the host itself otherwise. TLS still verifies the host name: only the
// address lookup changes. (clientv3 verifies a server against the host of its
// endpoint, so endpoints must be names, not addresses, for TLS.) A host
// resolve knows without an address (a member Pod not given one yet) is not
// dialed at all: looking its name up in the cluster's DNS before the name
// exists would make the DNS cache the name as missing, for as long as its
// negative answers live (5 to 30 seconds), and every Pod asking for it in
// that time (a joining member's etcd fetching the membership from its
// peers) would fail.
func ResolvingDialer(resolve func(host string) (string, bool)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip, ok := resolve(host); ok {
				if ip == "" {
					return nil, fmt.Errorf("%w: %s", ErrNoAddressYet, host)
				}
				addr = net.JoinHostPort(ip, port)
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

type client struct {
	c   *clientv3.Client
	cfg Config
}

var _ Client = (*client)(nil)

func (c *client) MemberList(ctx context.Context) (*MemberList, error) {
	resp, err := c.c.MemberList(ctx)
	if err != nil {
		return nil, classify(err)
	}
	out := &MemberList{ClusterID: resp.Header.ClusterId}
	for _, m := range resp.Members {
		out.Members = append(out.Members, member(m.ID, m.Name, m.PeerURLs, m.ClientURLs, m.IsLearner))
	}
	return out, nil
}

func (c *client) MemberAddAsLearner(ctx context.Context, peerURLs []string) (*Member, error) {
	resp, err := c.c.MemberAddAsLearner(ctx, peerURLs)
	if err != nil {
		return nil, classify(err)
	}
	m := member(resp.Member.ID, resp.Member.Name, resp.Member.PeerURLs, resp.Member.ClientURLs, true)
	return &m, nil
}

func (c *client) MemberPromote(ctx context.Context, id uint64) error {
	_, err := c.c.MemberPromote(ctx, id)
	return classify(err)
}

func (c *client) MemberRemove(ctx context.Context, id uint64) error {
	_, err := c.c.MemberRemove(ctx, id)
	if errors.Is(err, rpctypes.ErrMemberNotFound) {
		return fmt.Errorf("%w: %016x", ErrMemberNotFound, id)
	}
	return classify(err)
}

// Status asks one member about itself. Its port is tried first, bounded
// by the same context: clientv3 waits for a connection until the context
// ends, so a member whose etcd does not run (its port refuses, or its Pod
// has no address yet) cost the caller its whole deadline, on every pass
// that asked it; now it costs one refused connection.
func (c *client) Status(ctx context.Context, endpoint string) (*Status, error) {
	if err := c.connects(ctx, endpoint); err != nil {
		return nil, err
	}
	resp, err := c.c.Status(ctx, endpoint)
	if err != nil {
		return nil, classify(err)
	}
	st := &Status{
		ClusterID:        resp.Header.ClusterId,
		MemberID:         resp.Header.MemberId,
		Leader:           resp.Leader,
		RaftIndex:        resp.RaftIndex,
		RaftTerm:         resp.RaftTerm,
		RaftAppliedIndex: resp.RaftAppliedIndex,
		IsLearner:        resp.IsLearner,
		Version:          resp.Version,
		DBSize:           resp.DbSize,
		DBSizeInUse:      resp.DbSizeInUse,
		Errors:           resp.Errors,
	}
	if d := resp.DowngradeInfo; d != nil && d.Enabled {
		st.DowngradeTarget = d.TargetVersion
	}
	return st, nil
}

// connects opens and closes a TCP connection to the endpoint's address,
// through the client's address resolution.
func (c *client) connects(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Port() == "" {
		// Not a URL with a port: clientv3 says what is wrong with it.
		return nil
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	if c.cfg.Resolve != nil {
		dial = ResolvingDialer(c.cfg.Resolve)
	}
	conn, err := dial(ctx, u.Host)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	return conn.Close()
}

// ClusterVersion reads the member's /version document over its client URL,
// with the client's TLS and address resolution.
func (c *client) ClusterVersion(ctx context.Context, endpoint string) (string, error) {
	var dial func(context.Context, string, string) (net.Conn, error)
	if c.cfg.Resolve != nil {
		rd := ResolvingDialer(c.cfg.Resolve)
		dial = func(ctx context.Context, _, addr string) (net.Conn, error) { return rd(ctx, addr) }
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.cfg.TLS, DialContext: dial}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("reading the version of %s: %w", endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("reading the version of %s: status %d: %w", endpoint, resp.StatusCode, err)
	}
	return minorOf(v.Cluster), nil
}

// Health reads a member's /health document. The metrics listener is plain
// HTTP; the client's address resolution still applies.
func (c *client) Health(ctx context.Context, url string) error {
	var dial func(context.Context, string, string) (net.Conn, error)
	if c.cfg.Resolve != nil {
		rd := ResolvingDialer(c.cfg.Resolve)
		dial = func(ctx context.Context, _, addr string) (net.Conn, error) { return rd(ctx, addr) }
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return fmt.Errorf("reading %s: status %d: %w", url, resp.StatusCode, err)
	}
	if h.Health != "true" || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s says health %q (status %d) %s", ErrNotHealthy, url, h.Health, resp.StatusCode, h.Reason)
	}
	return nil
}

// minorOf turns "3.6.0" into "3.6".
func minorOf(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func (c *client) Downgrade(ctx context.Context, action DowngradeAction, version string) (string, error) {
	a := map[DowngradeAction]clientv3.DowngradeAction{
		DowngradeValidate: clientv3.DowngradeValidate,
		DowngradeEnable:   clientv3.DowngradeEnable,
		DowngradeCancel:   clientv3.DowngradeCancel,
	}[action]
	resp, err := c.c.Downgrade(ctx, a, version)
	if err != nil {
		return "", classify(err)
	}
	return minorOf(resp.Version), nil
}

func (c *client) MoveLeader(ctx context.Context, transferee uint64) error {
	_, err := c.c.MoveLeader(ctx, transferee)
	return classify(err)
}

func (c *client) AuthEnabled(ctx context.Context) (bool, error) {
	resp, err := c.c.AuthStatus(ctx)
	if err != nil {
		err = classify(err)
		if errors.Is(err, ErrAuthRequired) {
			// Only an auth-enabled cluster refuses an anonymous AuthStatus.
			return true, nil
		}
		return false, err
	}
	return resp.Enabled, nil
}

// EnableRootAuth creates the root user with the root role and turns auth on.
// Every step tolerates having been done before, so a crash in between is
// finished by the next call.
func (c *client) EnableRootAuth(ctx context.Context, password string) error {
	if _, err := c.c.UserAdd(ctx, "root", password); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		// Made by an earlier attempt, perhaps with another password.
		if _, err := c.c.UserChangePassword(ctx, "root", password); err != nil {
			return classify(fmt.Errorf("setting root's password: %w", err))
		}
	} else if err != nil {
		return classify(fmt.Errorf("adding user root: %w", err))
	}
	if _, err := c.c.UserGrantRole(ctx, "root", "root"); err != nil {
		return classify(fmt.Errorf("granting role root: %w", err))
	}
	if _, err := c.c.AuthEnable(ctx); err != nil {
		return classify(fmt.Errorf("enabling auth: %w", err))
	}
	return nil
}

func (c *client) ChangeRootPassword(ctx context.Context, password string) error {
	if _, err := c.c.UserChangePassword(ctx, "root", password); err != nil {
		return classify(fmt.Errorf("changing root's password: %w", err))
	}
	return nil
}

func (c *client) Close() error { return c.c.Close() }

func member(id uint64, name string, peers, clients []string, learner bool) Member {
	return Member{ID: id, Name: name, PeerURLs: peers, ClientURLs: clients, IsLearner: learner}
}
