package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/test/infra/etcd/fake"
)

// The contract: every rule of etcd that the operator relies on, run against
// real etcd servers (embedded, on loopback) and against the fake the
// controller tests use. The fake must refuse what etcd refuses, with the
// same error, or controller tests would pass on behaviour etcd forbids.

// testCluster is what a scenario drives: members named m0, m1, ...; m0 is
// the seed.
type testCluster interface {
	peerURL(name string) string
	clientURL(name string) string
	// healthURL is the member's /health on its metrics listener.
	healthURL(name string) string
	// start starts a member the membership lists (or, for the first one,
	// bootstraps the cluster) and waits until it serves.
	start(t *testing.T, name string)
	stop(t *testing.T, name string)
	// client is dialled to the given members only.
	client(t *testing.T, names ...string) etcd.Client
	// dial dials cfg after turning member names in its endpoints and
	// LoginVia into client URLs.
	dial(t *testing.T, cfg etcd.Config) (etcd.Client, error)
	// eventually polls cond while etcd's timers run (the fake's clock moves
	// one second per poll).
	eventually(t *testing.T, what string, cond func() (bool, string))
}

func TestContract(t *testing.T) {
	for _, sc := range scenarios {
		t.Run("fake/"+sc.name, func(t *testing.T) {
			sc.run(t, newFakeCluster())
		})
		t.Run("hollow/"+sc.name, func(t *testing.T) {
			sc.run(t, newHollowCluster(t))
		})
		t.Run("etcd/"+sc.name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("real etcd servers take seconds; -short runs the fake only")
			}
			sc.run(t, newRealCluster(t))
		})
	}
}

type scenario struct {
	name string
	run  func(t *testing.T, c testCluster)
}

var scenarios = []scenario{
	{"one learner at a time, no duplicate peer URL", oneLearnerAtATime},
	{"promotion needs a caught-up learner", promotionNeedsCaughtUpLearner},
	{"adding needs every voter connected", addingNeedsEveryVoterConnected},
	{"removing a connected voter needs enough connected voters", removingConnectedVoter},
	{"no leader without a quorum", noLeaderWithoutQuorum},
	{"leadership moves only through the leader to a voter", moveLeader},
	{"member list and status", memberListAndStatus},
	{"cluster version and the downgrade API", clusterVersionAndDowngrade},
	{"logging in goes through a voter, the token serves a learner", loginThroughVoter},
}

func loginThroughVoter(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	if _, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m1")}); err != nil {
		t.Fatal(err)
	}
	c.start(t, "m1")
	if err := via.EnableRootAuth(ctxT(t), "pw"); err != nil {
		t.Fatal(err)
	}
	root := func(password string, via []string, names ...string) (etcd.Client, error) {
		return c.dial(t, etcd.Config{Username: "root", Password: password, LoginVia: via, Endpoints: names})
	}
	if _, err := root("pw", nil, "m1"); err == nil {
		t.Fatal("a learner logged root in")
	}
	_, err := root("wrong", []string{"m0"}, "m1")
	mustIs(t, err, etcd.ErrAuthFailed, "logging in with a wrong password")
	anonymous, err := c.dial(t, etcd.Config{Endpoints: []string{"m0"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = anonymous.MemberList(ctxT(t))
	mustIs(t, err, etcd.ErrAuthRequired, "listing members without logging in")
	cl, err := root("pw", []string{"m0"}, "m1")
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(t, "the learner's status, logged in through the voter", func() (bool, string) {
		st, err := cl.Status(ctxT(t), c.clientURL("m1"))
		if err != nil {
			return false, err.Error()
		}
		return st.IsLearner, fmt.Sprintf("%+v", st)
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustIs(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// idOf finds a member's ID by its peer URL.
func idOf(t *testing.T, c etcd.Client, peer string) uint64 {
	t.Helper()
	list, err := c.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		for _, u := range m.PeerURLs {
			if u == peer {
				return m.ID
			}
		}
	}
	t.Fatalf("no member with peer URL %s in %+v", peer, list.Members)
	return 0
}

// grow adds the named member as a learner, starts it and promotes it once
// etcd agrees.
func grow(t *testing.T, c testCluster, via etcd.Client, name string) {
	t.Helper()
	c.eventually(t, "adding "+name, func() (bool, string) {
		_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL(name)})
		return err == nil, fmt.Sprint(err)
	})
	c.start(t, name)
	id := idOf(t, via, c.peerURL(name))
	c.eventually(t, "promoting "+name, func() (bool, string) {
		err := via.MemberPromote(ctxT(t), id)
		return err == nil, fmt.Sprint(err)
	})
}

func threeVoters(t *testing.T, c testCluster) etcd.Client {
	t.Helper()
	c.start(t, "m0")
	via := c.client(t, "m0")
	grow(t, c, via, "m1")
	grow(t, c, via, "m2")
	return via
}

func oneLearnerAtATime(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m0")})
	mustIs(t, err, etcd.ErrPeerURLExists, "adding the seed's peer URL again")
	if _, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m1")}); err != nil {
		t.Fatal(err)
	}
	_, err = via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m2")})
	mustIs(t, err, etcd.ErrTooManyLearners, "adding a second learner")
	_, err = via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m1")})
	if !errors.Is(err, etcd.ErrPeerURLExists) && !errors.Is(err, etcd.ErrTooManyLearners) {
		t.Fatalf("adding the learner's peer URL again: %v", err)
	}
}

func promotionNeedsCaughtUpLearner(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	seed := idOf(t, via, c.peerURL("m0"))
	mustIs(t, via.MemberPromote(ctxT(t), seed), etcd.ErrMemberNotLearner, "promoting a voter")
	mustIs(t, via.MemberPromote(ctxT(t), 0x1234), etcd.ErrMemberNotFound, "promoting an unknown member")
	mustIs(t, via.MemberRemove(ctxT(t), 0x1234), etcd.ErrMemberNotFound, "removing an unknown member")
	if _, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m1")}); err != nil {
		t.Fatal(err)
	}
	learner := idOf(t, via, c.peerURL("m1"))
	mustIs(t, via.MemberPromote(ctxT(t), learner), etcd.ErrLearnerNotReady, "promoting a learner that never started")
	c.start(t, "m1")
	c.eventually(t, "promoting the started learner", func() (bool, string) {
		err := via.MemberPromote(ctxT(t), learner)
		return err == nil, fmt.Sprint(err)
	})
}

func addingNeedsEveryVoterConnected(t *testing.T, c testCluster) {
	via := threeVoters(t, c)
	c.stop(t, "m2")
	_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m3")})
	mustIs(t, err, etcd.ErrUnhealthy, "adding while a voter is down")
	c.start(t, "m2")
	_, err = via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m3")})
	mustIs(t, err, etcd.ErrUnhealthy, "adding right after a voter reconnected")
	c.eventually(t, "adding once the voter was connected long enough", func() (bool, string) {
		_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m3")})
		return err == nil, fmt.Sprint(err)
	})
}

func removingConnectedVoter(t *testing.T, c testCluster) {
	via := threeVoters(t, c)
	c.eventually(t, "every voter connected for a while", func() (bool, string) {
		_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m3")})
		return err == nil, fmt.Sprint(err)
	})
	if err := via.MemberRemove(ctxT(t), idOf(t, via, c.peerURL("m3"))); err != nil {
		t.Fatalf("removing a learner: %v", err)
	}
	c.stop(t, "m2")
	m1 := idOf(t, via, c.peerURL("m1"))
	mustIs(t, via.MemberRemove(ctxT(t), m1), etcd.ErrUnhealthy, "removing a connected voter while another is down")
	if err := via.MemberRemove(ctxT(t), idOf(t, via, c.peerURL("m2"))); err != nil {
		t.Fatalf("removing the voter that is down: %v", err)
	}
}

func noLeaderWithoutQuorum(t *testing.T, c testCluster) {
	via := threeVoters(t, c)
	m0 := idOf(t, via, c.peerURL("m0"))
	c.eventually(t, "m0's /health healthy", func() (bool, string) {
		err := via.Health(ctxT(t), c.healthURL("m0"))
		return err == nil, fmt.Sprint(err)
	})
	c.stop(t, "m1")
	c.stop(t, "m2")
	c.eventually(t, "m0 without a leader", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL("m0"))
		if err != nil {
			return false, err.Error()
		}
		return st.Leader == 0 && st.MemberID == m0, fmt.Sprintf("leader %x", st.Leader)
	})
	c.eventually(t, "m0's /health unhealthy", func() (bool, string) {
		err := via.Health(ctxT(t), c.healthURL("m0"))
		return errors.Is(err, etcd.ErrNotHealthy), fmt.Sprint(err)
	})
	if err := via.Health(ctxT(t), c.healthURL("m1")); err == nil || errors.Is(err, etcd.ErrNotHealthy) {
		t.Errorf("a stopped member's /health: %v, want a connection error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := via.MemberList(ctx); err == nil {
		t.Fatal("a member without a quorum served a member list")
	}
}

func moveLeader(t *testing.T, c testCluster) {
	via := threeVoters(t, c)
	var leader uint64
	c.eventually(t, "a leader", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL("m0"))
		if err != nil {
			return false, err.Error()
		}
		leader = st.Leader
		return leader != 0, "no leader"
	})
	names := map[uint64]string{}
	for _, n := range []string{"m0", "m1", "m2"} {
		names[idOf(t, via, c.peerURL(n))] = n
	}
	var follower, other string
	for id, n := range names {
		if id == leader {
			continue
		}
		if follower == "" {
			follower = n
		} else {
			other = n
		}
	}
	// A promoted member applies its own promotion a moment after the
	// leader does; until then it refuses the call as a learner.
	fc := c.client(t, follower)
	var err error
	c.eventually(t, follower+" applied its promotion", func() (bool, string) {
		err = fc.MoveLeader(ctxT(t), leader)
		return !errors.Is(err, etcd.ErrLearnerRefused), fmt.Sprint(err)
	})
	mustIs(t, err, etcd.ErrNotLeader, "moving leadership through a follower")
	c.eventually(t, "a learner added", func() (bool, string) {
		_, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m3")})
		return err == nil, fmt.Sprint(err)
	})
	learner := idOf(t, via, c.peerURL("m3"))
	lc := c.client(t, names[leader])
	mustIs(t, lc.MoveLeader(ctxT(t), learner), etcd.ErrBadTransferee, "moving leadership to a learner")
	target := idOf(t, via, c.peerURL(other))
	// etcd gives a transfer an election timeout to complete and the call a
	// few seconds; on a loaded machine one attempt can run out of either.
	c.eventually(t, "leadership moved to voter "+other, func() (bool, string) {
		err := lc.MoveLeader(ctxT(t), target)
		return err == nil, fmt.Sprint(err)
	})
	c.eventually(t, "the new leader", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL(follower))
		if err != nil {
			return false, err.Error()
		}
		return st.Leader == target, fmt.Sprintf("leader %x", st.Leader)
	})
}

func memberListAndStatus(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	if _, err := via.MemberAddAsLearner(ctxT(t), []string{c.peerURL("m1")}); err != nil {
		t.Fatal(err)
	}
	list, err := via.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if list.ClusterID == 0 || len(list.Members) != 2 {
		t.Fatalf("member list %+v", list)
	}
	for _, m := range list.Members {
		if m.PeerURLs[0] == c.peerURL("m1") && (m.Name != "" || !m.IsLearner || len(m.ClientURLs) != 0) {
			t.Errorf("a learner that never started is listed as %+v", m)
		}
	}
	c.start(t, "m1")
	learner := idOf(t, via, c.peerURL("m1"))
	c.eventually(t, "the learner's status", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL("m1"))
		if err != nil {
			return false, err.Error()
		}
		ok := st.IsLearner && st.MemberID == learner && st.ClusterID == list.ClusterID && st.Leader != 0
		return ok, fmt.Sprintf("%+v", st)
	})
	c.eventually(t, "the learner's /health", func() (bool, string) {
		err := via.Health(ctxT(t), c.healthURL("m1"))
		return err == nil, fmt.Sprint(err)
	})
	list, err = via.MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.ID == learner && m.Name != "m1" {
			t.Errorf("the started learner is listed as %+v", m)
		}
	}
}

func clusterVersionAndDowngrade(t *testing.T, c testCluster) {
	c.start(t, "m0")
	via := c.client(t, "m0")
	var cv string
	c.eventually(t, "a cluster version", func() (bool, string) {
		var err error
		cv, err = via.ClusterVersion(ctxT(t), c.clientURL("m0"))
		return err == nil && strings.Count(cv, ".") == 1, fmt.Sprint(cv, err)
	})
	major, minor, _ := strings.Cut(cv, ".")
	below := func(n int) string {
		m, _ := strconv.Atoi(minor)
		return fmt.Sprintf("%s.%d.0", major, m-n)
	}
	if _, err := via.Downgrade(ctxT(t), etcd.DowngradeValidate, below(2)); err == nil {
		t.Errorf("a downgrade two minors below %s validated", cv)
	}
	if _, err := via.Downgrade(ctxT(t), etcd.DowngradeValidate, below(1)); err != nil {
		t.Fatalf("a downgrade one minor below %s: %v", cv, err)
	}
	if _, err := via.Downgrade(ctxT(t), etcd.DowngradeEnable, below(1)); err != nil {
		t.Fatalf("enabling a downgrade: %v", err)
	}
	c.eventually(t, "the downgrade in status", func() (bool, string) {
		st, err := via.Status(ctxT(t), c.clientURL("m0"))
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(st.DowngradeTarget, strings.TrimSuffix(below(1), ".0")), st.DowngradeTarget
	})
	if _, err := via.Downgrade(ctxT(t), etcd.DowngradeCancel, ""); err != nil {
		t.Fatalf("cancelling the downgrade: %v", err)
	}
	c.eventually(t, "the cluster version back", func() (bool, string) {
		got, err := via.ClusterVersion(ctxT(t), c.clientURL("m0"))
		return err == nil && got == cv, fmt.Sprint(got, err)
	})
}

// --- the fake -----------------------------------------------------------

type fakeCluster struct {
	c     *fake.Cluster
	clock *clocktesting.FakeClock
}

func newFakeCluster() *fakeCluster {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	return &fakeCluster{c: fake.New(0xc1a5, clk), clock: clk}
}

func (f *fakeCluster) peerURL(name string) string   { return "http://" + name + ":2380" }
func (f *fakeCluster) clientURL(name string) string { return "http://" + name + ":2379" }
func (f *fakeCluster) healthURL(name string) string { return "http://" + name + ":2381/health" }

func (f *fakeCluster) start(t *testing.T, name string) {
	if len(f.c.Members()) == 0 {
		f.c.Bootstrap(name, f.peerURL(name), f.clientURL(name))
		return
	}
	if err := f.c.Start(f.peerURL(name), name, f.clientURL(name)); err != nil {
		t.Fatal(err)
	}
	f.c.CatchUp(f.peerURL(name))
}

func (f *fakeCluster) stop(_ *testing.T, name string) { f.c.Stop(f.peerURL(name)) }

func (f *fakeCluster) dial(_ *testing.T, cfg etcd.Config) (etcd.Client, error) {
	cfg.Endpoints, cfg.LoginVia = urls(cfg.Endpoints, f.clientURL), urls(cfg.LoginVia, f.clientURL)
	return f.c.Dialer()(context.Background(), cfg)
}

func urls(names []string, url func(string) string) []string {
	var out []string
	for _, n := range names {
		out = append(out, url(n))
	}
	return out
}

func (f *fakeCluster) client(t *testing.T, names ...string) etcd.Client {
	cfg := etcd.Config{}
	for _, n := range names {
		cfg.Endpoints = append(cfg.Endpoints, f.clientURL(n))
	}
	c, err := f.c.Dialer()(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fakeCluster) eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	stepUntil(t, f.clock, what, cond)
}

// stepUntil polls cond, moving the fake's clock one second per poll.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for range 30 {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		clk.Step(time.Second)
	}
	t.Fatalf("%s: not within 30 s of fake time; last: %s", what, last)
}

// --- real etcd ----------------------------------------------------------

type realMember struct {
	peer, client, metrics string
	server                *embed.Etcd
	started               bool
}

type realCluster struct {
	dir     string
	members map[string]*realMember
}

func newRealCluster(t *testing.T) *realCluster {
	c := &realCluster{dir: t.TempDir(), members: map[string]*realMember{}}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.server != nil {
				m.server.Close()
			}
		}
	})
	return c
}

func (c *realCluster) member(name string) *realMember {
	m := c.members[name]
	if m == nil {
		m = &realMember{}
		c.members[name] = m
	}
	return m
}

// URLs are allocated on first use, before the member exists anywhere.
func (c *realCluster) peerURL(name string) string {
	m := c.member(name)
	if m.peer == "" {
		m.peer = "http://" + mustFreePort()
	}
	return m.peer
}

func (c *realCluster) clientURL(name string) string {
	m := c.member(name)
	if m.client == "" {
		m.client = "http://" + mustFreePort()
	}
	return m.client
}

func (c *realCluster) healthURL(name string) string {
	m := c.member(name)
	if m.metrics == "" {
		m.metrics = "http://" + mustFreePort()
	}
	return m.metrics + "/health"
}

func mustFreePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func (c *realCluster) start(t *testing.T, name string) {
	t.Helper()
	m := c.member(name)
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(c.dir, name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenPeerUrls = []url.URL{mustURL(c.peerURL(name))}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.ListenClientUrls = []url.URL{mustURL(c.clientURL(name))}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenMetricsUrls = []url.URL{mustURL(strings.TrimSuffix(c.healthURL(name), "/health"))}
	cfg.InitialClusterToken = "contract"
	cfg.InitialCluster, cfg.ClusterState = c.initialCluster(t, name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	m.server, m.started = e, true
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("%s: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not become ready", name)
	}
}

// initialCluster is what the operator renders: the seed alone for the
// first start, else etcd's membership with the starting member's name.
func (c *realCluster) initialCluster(t *testing.T, name string) (string, string) {
	m := c.member(name)
	if m.started {
		return name + "=" + m.peer, embed.ClusterStateFlagExisting
	}
	var running []string
	for n, o := range c.members {
		if o.server != nil && n != name {
			running = append(running, n)
		}
	}
	if len(running) == 0 {
		return name + "=" + c.peerURL(name), embed.ClusterStateFlagNew
	}
	list, err := c.client(t, running...).MemberList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, em := range list.Members {
		n := em.Name
		if em.PeerURLs[0] == m.peer {
			n = name
		}
		if n != "" {
			parts = append(parts, n+"="+em.PeerURLs[0])
		}
	}
	return strings.Join(parts, ","), embed.ClusterStateFlagExisting
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

func (c *realCluster) stop(_ *testing.T, name string) {
	m := c.member(name)
	if m.server != nil {
		m.server.Close()
		m.server = nil
	}
}

func (c *realCluster) client(t *testing.T, names ...string) etcd.Client {
	cfg := etcd.Config{DialTimeout: 2 * time.Second}
	for _, n := range names {
		cfg.Endpoints = append(cfg.Endpoints, c.clientURL(n))
	}
	cl, err := etcd.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func (c *realCluster) dial(t *testing.T, cfg etcd.Config) (etcd.Client, error) {
	cfg.Endpoints, cfg.LoginVia = urls(cfg.Endpoints, c.clientURL), urls(cfg.LoginVia, c.clientURL)
	cfg.DialTimeout = 2 * time.Second
	cl, err := etcd.Dial(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return cl, err
}

func (c *realCluster) eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, seen := cond()
		last = seen
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within 30 s; last: %s", what, last)
	}
}

// --- hollow members -------------------------------------------------------

// hollowCluster is the fake served over etcd's wire protocol (fake.Hollow),
// dialled with the real client: what the scale harness runs by the
// thousand. Each member listens on an address of its own in 127.0.0.0/8.
type hollowCluster struct {
	c     *fake.Cluster
	h     *fake.Hollow
	clock *clocktesting.FakeClock
	base  string
	ips   map[string]string
}

func newHollowCluster(t *testing.T) *hollowCluster {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	c := fake.New(0xc1a5, clk)
	h := fake.NewHollow(c)
	h.RequestTimeout = 2 * time.Second
	t.Cleanup(h.Close)
	// A block of loopback addresses of its own, so parallel runs do not meet.
	n := time.Now().UnixNano()
	return &hollowCluster{c: c, h: h, clock: clk, base: fmt.Sprintf("127.%d.%d.", 64+n%128, (n/128)%256), ips: map[string]string{}}
}

func (f *hollowCluster) ip(name string) string {
	if f.ips[name] == "" {
		f.ips[name] = f.base + strconv.Itoa(len(f.ips)+1)
	}
	return f.ips[name]
}

func (f *hollowCluster) peerURL(name string) string   { return "http://" + f.ip(name) + ":2380" }
func (f *hollowCluster) clientURL(name string) string { return "http://" + f.ip(name) + ":2379" }
func (f *hollowCluster) healthURL(name string) string { return "http://" + f.ip(name) + ":2381/health" }

func (f *hollowCluster) start(t *testing.T, name string) {
	t.Helper()
	m := fake.HollowMember{Name: name, PeerURL: f.peerURL(name), ClientURL: f.clientURL(name), Addr: f.ip(name), MetricsPort: 2381}
	if len(f.c.Members()) == 0 {
		if err := f.h.Bootstrap(m); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := f.h.Start(m); err != nil {
		t.Fatal(err)
	}
	f.c.CatchUp(f.peerURL(name))
}

func (f *hollowCluster) stop(_ *testing.T, name string) { f.h.Stop(name) }

func (f *hollowCluster) client(t *testing.T, names ...string) etcd.Client {
	cl, err := f.dial(t, etcd.Config{Endpoints: names})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (f *hollowCluster) dial(t *testing.T, cfg etcd.Config) (etcd.Client, error) {
	cfg.Endpoints, cfg.LoginVia = urls(cfg.Endpoints, f.clientURL), urls(cfg.LoginVia, f.clientURL)
	cfg.DialTimeout = 2 * time.Second
	cl, err := etcd.Dial(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return cl, err
}

func (f *hollowCluster) eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	stepUntil(t, f.clock, what, cond)
}
