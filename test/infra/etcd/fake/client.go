package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// client serves each request through the first of its endpoints whose member
// runs, as the real client fails over only on a refused connection: a member
// that runs but is cut off is not failed over, its requests time out.
type client struct {
	c   *Cluster
	cfg etcd.Config
	// token is what logging in at dial gave ("" when auth was off).
	token string
}

var _ etcd.Client = (*client)(nil)

// serving returns the member that serves this client's requests.
func (f *client) serving() (*member, error) {
	for _, ep := range f.cfg.Endpoints {
		if m := f.c.byClient(ep); m != nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("fake: dial %v: connection refused", f.cfg.Endpoints)
}

// consensus returns the serving member if it can reach a quorum and the
// credentials are good, as every request that goes through raft needs.
func (f *client) consensus() (*member, error) {
	m, err := f.serving()
	if err != nil {
		return nil, err
	}
	if f.c.leaderSeenBy(m) == 0 {
		return nil, fmt.Errorf("fake: %s cannot reach a quorum: %w", m.Name, context.DeadlineExceeded)
	}
	if err := f.authInfo(); err != nil {
		return nil, err
	}
	return m, nil
}

// authInfo refuses a request without a valid token while auth is on, as
// etcd does for every request but its own status reads without auth.
// Enabling auth and changing the password invalidate earlier tokens.
func (f *client) authInfo() error {
	switch {
	case !f.c.AuthOn:
		return nil
	case f.token == "":
		return etcd.ErrAuthRequired
	case f.token != f.c.currentToken():
		return etcd.ErrAuthTokenInvalid
	}
	return nil
}

func (f *client) MemberList(context.Context) (*etcd.MemberList, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return nil, err
	}
	return &etcd.MemberList{ClusterID: f.c.clusterID, Members: f.c.list()}, nil
}

// MemberAddAsLearner checks in etcd's order: the strict reconfiguration
// check before the proposal, then the peer URL and learner limit when the
// change is applied.
func (f *client) MemberAddAsLearner(_ context.Context, peerURLs []string) (*etcd.Member, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	self, err := f.consensus()
	if err != nil {
		return nil, err
	}
	if err := f.c.allVotersConnected(self); err != nil {
		return nil, err
	}
	learners := 0
	for _, m := range f.c.members {
		if m.IsLearner {
			learners++
		}
		for _, u := range peerURLs {
			if slices.Contains(m.PeerURLs, u) {
				return nil, fmt.Errorf("%w: %s", etcd.ErrPeerURLExists, u)
			}
		}
	}
	if learners >= f.c.MaxLearners {
		return nil, etcd.ErrTooManyLearners
	}
	id := f.c.newID()
	m := &member{Member: etcd.Member{ID: id, PeerURLs: slices.Clone(peerURLs), IsLearner: true}, dbSize: newBackend, dbInUse: newBackend}
	f.c.members[id] = m
	f.c.commit++
	out := m.Member
	return &out, nil
}

// allVotersConnected is etcd's check before adding a member: every voter
// connected to the member serving the request for the health interval.
func (c *Cluster) allVotersConnected(self *member) error {
	if c.Unhealthy {
		return etcd.ErrUnhealthy
	}
	for _, v := range c.voters() {
		if v.ID != self.ID && !c.connectedFor(v) {
			return fmt.Errorf("%w: voter %016x not connected for %s", etcd.ErrUnhealthy, v.ID, HealthInterval)
		}
	}
	return nil
}

func (f *client) MemberPromote(_ context.Context, id uint64) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return err
	}
	m, ok := f.c.members[id]
	switch {
	case !ok:
		return etcd.ErrMemberNotFound
	case !f.c.enoughStartedToPromote():
		return fmt.Errorf("%w: not enough started members", etcd.ErrUnhealthy)
	case !m.IsLearner:
		return etcd.ErrMemberNotLearner
	case !m.caughtUp || !f.c.connected(m):
		return etcd.ErrLearnerNotReady
	case f.c.Unhealthy:
		return etcd.ErrUnhealthy
	}
	m.IsLearner = false
	f.c.commit++
	return nil
}

// enoughStartedToPromote: the started voters and the learner make a quorum
// of the voters after the promotion.
func (c *Cluster) enoughStartedToPromote() bool {
	members, started := 1, 1
	for _, v := range c.voters() {
		members++
		if v.started {
			started++
		}
	}
	return started >= members/2+1
}

func (f *client) MemberRemove(_ context.Context, id uint64) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	self, err := f.consensus()
	if err != nil {
		return err
	}
	m, ok := f.c.members[id]
	if !ok {
		return fmt.Errorf("%w: %016x", etcd.ErrMemberNotFound, id)
	}
	if !m.IsLearner {
		if err := f.c.mayRemoveVoter(self, m); err != nil {
			return err
		}
	}
	if m.running {
		if f.c.removedAt == nil {
			f.c.removedAt = map[string]bool{}
		}
		for _, u := range m.ClientURLs {
			f.c.removedAt[u] = true
		}
	}
	delete(f.c.members, id)
	f.c.commit++
	f.c.elect()
	return nil
}

// mayRemoveVoter is etcd's strict check for removing a voter: the started
// voters that stay make a quorum of those that stay; a voter that is down
// may go; a connected one only if enough voters stay connected for the
// health interval.
func (c *Cluster) mayRemoveVoter(self, gone *member) error {
	if c.Unhealthy {
		return etcd.ErrUnhealthy
	}
	voters := c.voters()
	stay, started := 0, 0
	for _, v := range voters {
		if v.ID == gone.ID {
			continue
		}
		stay++
		if v.started {
			started++
		}
	}
	if started < stay/2+1 {
		return fmt.Errorf("%w: not enough started members", etcd.ErrUnhealthy)
	}
	if gone.ID != self.ID && !c.connected(gone) {
		return nil
	}
	active := 0
	for _, v := range voters {
		if v.ID == self.ID || c.connectedFor(v) {
			active++
		}
	}
	if active-1 < 1+(len(voters)-1)/2 {
		return fmt.Errorf("%w: %d of %d voters connected", etcd.ErrUnhealthy, active, len(voters))
	}
	return nil
}

func (f *client) Status(_ context.Context, endpoint string) (*etcd.Status, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	m := f.c.byClient(endpoint)
	if m == nil && f.c.cutAt(endpoint) != nil {
		return nil, timedOut(endpoint)
	}
	if m == nil && f.c.silentAt(endpoint) != nil {
		return nil, fmt.Errorf("fake: %s serves no client before it knows it has published itself: %w", endpoint, context.DeadlineExceeded)
	}
	if m == nil && f.c.removedAt[endpoint] {
		f.c.askedRemoved = append(f.c.askedRemoved, endpoint)
		return nil, fmt.Errorf("fake: %s: connection reset (the removed member panicked on the status call)", endpoint)
	}
	if m == nil {
		// The real client tries the port first and carries the errno
		// (etcd.Unreachable).
		return nil, fmt.Errorf("fake: dial %s: %w", endpoint, syscall.ECONNREFUSED)
	}
	if err := f.authInfo(); err != nil {
		return nil, err
	}
	st := &etcd.Status{
		ClusterID: f.c.clusterID, MemberID: m.ID, Leader: f.c.leaderSeenBy(m),
		RaftIndex: f.c.commit, RaftTerm: m.term, RaftAppliedIndex: f.c.commit,
		IsLearner: m.IsLearner, Version: m.version, DBSize: m.dbSize, DBSizeInUse: m.dbInUse,
	}
	if st.Leader == 0 {
		st.Errors = append(st.Errors, "etcdserver: no leader")
	}
	for _, id := range slices.Sorted(maps.Keys(f.c.alarms)) {
		st.Errors = append(st.Errors, fmt.Sprintf("memberID:%d alarm:%s ", id, f.c.alarms[id]))
	}
	if f.c.downgrade != "" {
		st.DowngradeTarget = f.c.downgrade + ".0"
	}
	if !m.caughtUp {
		st.RaftAppliedIndex = f.c.commit / 10
	}
	return st, nil
}

// Health answers as etcd's /health on the metrics listener of the member
// whose host the URL names: healthy while it runs, knows a leader and has
// applied what the leader committed (a linearizable read waits for that).
// It answers before the member has published itself.
func (f *client) Health(_ context.Context, rawURL string) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	var m *member
	for _, x := range f.c.members {
		for _, p := range x.PeerURLs {
			if pu, err := url.Parse(p); err == nil && pu.Hostname() == u.Hostname() {
				m = x
			}
		}
	}
	switch {
	case m == nil || !m.running:
		return fmt.Errorf("fake: dial %s: %w", rawURL, syscall.ECONNREFUSED)
	case f.c.leaderSeenBy(m) == 0:
		return fmt.Errorf("%w: %s: no leader", etcd.ErrNotHealthy, rawURL)
	case !m.caughtUp:
		return fmt.Errorf("%w: %s: the linearizable read timed out", etcd.ErrNotHealthy, rawURL)
	}
	return nil
}

func (f *client) ClusterVersion(_ context.Context, endpoint string) (string, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if f.c.cutAt(endpoint) != nil {
		return "", timedOut(endpoint)
	}
	if f.c.byClient(endpoint) == nil {
		return "", fmt.Errorf("fake: dial %s: %w", endpoint, syscall.ECONNREFUSED)
	}
	return f.c.clusterVersionOf(nil), nil
}

// Downgrade follows etcd 3.6: a downgrade goes one minor below the cluster
// version, on a cluster of 3.6 or later; enabling it lowers the cluster
// version at once, so that members of the older minor may run.
func (f *client) Downgrade(_ context.Context, action etcd.DowngradeAction, version string) (string, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return "", err
	}
	cluster := f.c.clusterVersionOf(nil)
	if action == etcd.DowngradeCancel {
		if f.c.downgrade == "" {
			return cluster, errors.New("etcdserver: no inflight downgrade job")
		}
		f.c.downgrade, f.c.lowered = "", false
		return f.c.clusterVersion, nil
	}
	target := majorMinor(version)
	if f.c.downgrade == "" && (minor(target+".0") != minor(cluster+".0")-1 || minor(cluster+".0") < 6) {
		return cluster, fmt.Errorf("etcdserver: invalid downgrade target version %s (cluster version %s)", version, cluster)
	}
	if action == etcd.DowngradeEnable && f.c.downgrade == "" {
		f.c.downgrade, f.c.downgradeAt, f.c.lowered = target, f.c.clock.Now(), false
	}
	return cluster, nil
}

func (f *client) MoveLeader(_ context.Context, transferee uint64) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	self, err := f.consensus()
	if err != nil {
		return err
	}
	if self.ID != f.c.leader {
		return etcd.ErrNotLeader
	}
	t, ok := f.c.members[transferee]
	switch {
	case !ok || t.IsLearner:
		return etcd.ErrBadTransferee
	case !f.c.connected(t):
		return fmt.Errorf("fake: leader transfer to %016x: %w", transferee, context.DeadlineExceeded)
	}
	f.c.setLeader(transferee)
	f.c.syncTerms()
	return nil
}

func (f *client) AuthEnabled(context.Context) (bool, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.serving(); err != nil {
		return false, err
	}
	return f.c.AuthOn, nil
}

func (f *client) EnableRootAuth(_ context.Context, password string) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return err
	}
	f.c.AuthOn, f.c.RootPassword = true, password
	f.c.authRevision++
	return nil
}

func (f *client) ChangeRootPassword(_ context.Context, password string) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return err
	}
	f.c.RootPassword = password
	f.c.authRevision++
	return nil
}

func (f *client) Close() error { return nil }
