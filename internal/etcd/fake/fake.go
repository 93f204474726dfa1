// Package fake is an in-memory etcd cluster for controller tests. It enforces
// the membership rules the operator depends on (one learner at a time, promote
// only when caught up, refuse changes while unhealthy) so that tests assert
// the state a controller leaves behind, not the calls it made.
package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// Cluster is a fake etcd cluster. The zero value is not usable; call New.
type Cluster struct {
	mu        sync.Mutex
	clusterID uint64
	nextID    uint64
	members   map[uint64]*member
	// Unhealthy makes membership changes fail with etcd.ErrUnhealthy, as etcd
	// does in the seconds after a change.
	Unhealthy bool
	// AuthOn is whether auth is enabled; RootPassword the root password.
	AuthOn       bool
	RootPassword string
	// Dials counts Dial calls, to check that steady state dials nothing.
	Dials int
}

type member struct {
	etcd.Member
	up       bool
	version  string
	caughtUp bool
}

// New returns an empty fake cluster with the given cluster ID.
func New(clusterID uint64) *Cluster {
	return &Cluster{clusterID: clusterID, nextID: 0x1000, members: map[uint64]*member{}}
}

// Bootstrap adds a started voter, as a seed bootstrapping the cluster does.
func (c *Cluster) Bootstrap(name, peerURL, clientURL string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.newID()
	c.members[id] = &member{Member: etcd.Member{ID: id, Name: name, PeerURLs: []string{peerURL}, ClientURLs: []string{clientURL}}, up: true, caughtUp: true, version: "3.6.16"}
	return id
}

// Start marks the member with this peer URL as started: it gets a name and a
// client URL, and answers Status. Catching up is separate (CatchUp).
func (c *Cluster) Start(peerURL, name, clientURL string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPeer(peerURL)
	if m == nil {
		return fmt.Errorf("fake: no member with peer URL %s", peerURL)
	}
	m.Name, m.ClientURLs, m.up = name, []string{clientURL}, true
	if m.version == "" {
		m.version = "3.6.16"
	}
	return nil
}

// CatchUp makes a started learner's applied index reach the leader's.
func (c *Cluster) CatchUp(peerURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil && m.up {
		m.caughtUp = true
	}
}

// SetUp makes a member reachable or not.
func (c *Cluster) SetUp(peerURL string, up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.up = up
	}
}

// Members returns a copy of the membership, sorted by ID.
func (c *Cluster) Members() []etcd.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list()
}

// Dialer returns an etcd.Dialer whose clients talk to this cluster through the
// given endpoints; an endpoint of a member that is down fails like a refused
// connection.
func (c *Cluster) Dialer() etcd.Dialer {
	return func(_ context.Context, cfg etcd.Config) (etcd.Client, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.Dials++
		for _, ep := range cfg.Endpoints {
			if m := c.byClient(ep); m != nil && m.up {
				return &client{c: c, cfg: cfg}, nil
			}
		}
		return nil, fmt.Errorf("fake: no reachable endpoint in %v", cfg.Endpoints)
	}
}

func (c *Cluster) newID() uint64 {
	c.nextID++
	return c.nextID
}

func (c *Cluster) list() []etcd.Member {
	out := make([]etcd.Member, 0, len(c.members))
	for _, m := range c.members {
		cp := m.Member
		cp.PeerURLs = slices.Clone(m.PeerURLs)
		cp.ClientURLs = slices.Clone(m.ClientURLs)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b etcd.Member) int { return int(a.ID) - int(b.ID) })
	return out
}

func (c *Cluster) byPeer(url string) *member {
	for _, m := range c.members {
		if slices.Contains(m.PeerURLs, url) {
			return m
		}
	}
	return nil
}

func (c *Cluster) byClient(url string) *member {
	for _, m := range c.members {
		if slices.Contains(m.ClientURLs, url) {
			return m
		}
	}
	return nil
}

// hasQuorum reports whether a majority of voters is up.
func (c *Cluster) hasQuorum() bool {
	voters, up := 0, 0
	for _, m := range c.members {
		if m.IsLearner {
			continue
		}
		voters++
		if m.up {
			up++
		}
	}
	return voters > 0 && up > voters/2
}

type client struct {
	c   *Cluster
	cfg etcd.Config
}

func (f *client) check() error {
	if !f.c.hasQuorum() {
		return errors.New("fake: context deadline exceeded (no quorum)")
	}
	if f.c.AuthOn && (f.cfg.Username != "root" || f.cfg.Password != f.c.RootPassword) {
		if f.cfg.Username == "" {
			return etcd.ErrAuthRequired
		}
		return etcd.ErrAuthFailed
	}
	return nil
}

func (f *client) MemberList(context.Context) (*etcd.MemberList, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.check(); err != nil {
		return nil, err
	}
	return &etcd.MemberList{ClusterID: f.c.clusterID, Members: f.c.list()}, nil
}

func (f *client) MemberAddAsLearner(_ context.Context, peerURLs []string) (*etcd.Member, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.c.Unhealthy {
		return nil, etcd.ErrUnhealthy
	}
	for _, m := range f.c.members {
		if m.IsLearner {
			return nil, etcd.ErrTooManyLearners
		}
		for _, u := range peerURLs {
			if slices.Contains(m.PeerURLs, u) {
				return nil, fmt.Errorf("fake: peerURL %s exists", u)
			}
		}
	}
	id := f.c.newID()
	m := &member{Member: etcd.Member{ID: id, PeerURLs: slices.Clone(peerURLs), IsLearner: true}}
	f.c.members[id] = m
	out := m.Member
	return &out, nil
}

func (f *client) MemberPromote(_ context.Context, id uint64) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	m, ok := f.c.members[id]
	switch {
	case !ok:
		return etcd.ErrMemberNotFound
	case !m.IsLearner:
		return errors.New("fake: member is not a learner")
	case !m.up || !m.caughtUp:
		return etcd.ErrLearnerNotReady
	case f.c.Unhealthy:
		return etcd.ErrUnhealthy
	}
	m.IsLearner = false
	return nil
}

func (f *client) MemberRemove(_ context.Context, id uint64) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if _, ok := f.c.members[id]; !ok {
		return etcd.ErrMemberNotFound
	}
	if f.c.Unhealthy {
		return etcd.ErrUnhealthy
	}
	delete(f.c.members, id)
	return nil
}

func (f *client) Status(_ context.Context, endpoint string) (*etcd.Status, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	m := f.c.byClient(endpoint)
	if m == nil || !m.up {
		return nil, fmt.Errorf("fake: %s unreachable", endpoint)
	}
	leader := f.c.leader()
	st := &etcd.Status{ClusterID: f.c.clusterID, MemberID: m.ID, Leader: leader, RaftIndex: 100, RaftTerm: 2, IsLearner: m.IsLearner, Version: m.version}
	st.RaftAppliedIndex = 100
	if !m.caughtUp {
		st.RaftAppliedIndex = 10
	}
	return st, nil
}

// leader is the up voter with the lowest ID.
func (c *Cluster) leader() uint64 {
	var best uint64
	for id, m := range c.members {
		if !m.IsLearner && m.up && (best == 0 || id < best) {
			best = id
		}
	}
	return best
}

func (f *client) AuthEnabled(context.Context) (bool, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	return f.c.AuthOn, nil
}

func (f *client) EnableRootAuth(_ context.Context, password string) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.c.AuthOn, f.c.RootPassword = true, password
	return nil
}

func (f *client) Close() error { return nil }

// String describes the membership, for test failure messages.
func (c *Cluster) String() string {
	var b strings.Builder
	for _, m := range c.Members() {
		fmt.Fprintf(&b, "%x %s learner=%t %v clients=%v\n", m.ID, m.Name, m.IsLearner, m.PeerURLs, m.ClientURLs)
	}
	return b.String()
}
