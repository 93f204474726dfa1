// Package fake is an in-memory etcd cluster for controller tests. It refuses
// what etcd refuses, for every rule the operator depends on, so that tests
// assert the state a controller leaves behind and a controller cannot pass a
// test by doing something etcd would not allow:
//
//   - a request served by a member cut off from a quorum times out;
//   - one learner at a time (etcd's --max-learners default), no duplicate
//     peer URL, promotion only of a learner that has caught up;
//   - etcd's strict reconfiguration check: adding a member needs every voter
//     connected for the last 5 s, promoting or removing needs enough started
//     members, and removing a connected voter needs enough voters connected
//     for 5 s besides it;
//   - a leader only while a quorum of voters is connected, MoveLeader only
//     through the leader and only to a voter;
//   - /health (on the metrics listener) healthy only for a running member
//     that knows a leader and has caught up; it answers before the member
//     serves its client port, which a new learner held by PublishLate does
//     not until Publish.
//
// internal/etcd/contract_test.go runs the same scenarios against this fake and
// against real etcd servers, so the two stay in agreement; and a third time
// against the fake served over etcd's wire protocol (Hollow, hollow.go),
// dialled with the real client, as the scale harness runs it.
package fake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// HealthInterval is how long etcd wants a voter connected before it accepts
// a membership change that depends on it.
const HealthInterval = 5 * time.Second

// Cluster is a fake etcd cluster. The zero value is not usable; call New.
type Cluster struct {
	mu        sync.Mutex
	clock     clock.PassiveClock
	rng       *rand.Rand
	clusterID uint64
	members   map[uint64]*member
	leader    uint64
	commit    uint64
	// term is raft's term: it moves on with every change of leader.
	term uint64
	// alarms are the alarms raised, by member ID (etcd keeps them in the
	// replicated store: every member reports all of them).
	alarms map[uint64]string
	// downgrade is the minor ("3.6") a downgrade in progress goes to;
	// downgradeAt is when it was enabled, lowered whether etcd's version
	// monitor has set the cluster version to it yet.
	downgrade   string
	downgradeAt time.Time
	lowered     bool
	// clusterVersion is the cluster version (major.minor) etcd decided:
	// raised to the lowest minor the members run, only while every member
	// answers; lowered only by a downgrade.
	clusterVersion string

	// removedAt are the client URLs of members removed through a client
	// whose process still ran: etcd 3.6 stops such a member, and a status
	// call that reaches it after it applied its own removal panics it
	// (membership's "failed to find local ID in cluster members").
	// askedRemoved records each such call (see AskedRemoved).
	removedAt    map[string]bool
	askedRemoved []string

	// MaxLearners is etcd's --max-learners.
	MaxLearners int
	// Unhealthy makes membership changes fail with etcd.ErrUnhealthy
	// whatever the connections, for tests that hold etcd back.
	Unhealthy bool
	// PublishLate: a new learner started while it is set runs and is
	// connected, but does not know it has published itself through raft
	// (as a learner that caught up from the leader's snapshot, which
	// carried its publish, until etcd retries after its request timeout):
	// the leader lists it by name, its client port answers nothing
	// (requests time out), its /health answers. Publish ends it.
	PublishLate bool
	// AuthOn is whether auth is enabled; RootPassword the root password.
	AuthOn       bool
	RootPassword string
	// authRevision counts enables and password changes: a token issued
	// before the last one is refused.
	authRevision int
	// Dials counts Dial calls, to check that steady state dials nothing.
	Dials int
}

type member struct {
	etcd.Member
	// running: the process is up and accepts connections.
	running bool
	// isolated: running, but cut off from every peer.
	isolated bool
	// started: the member published its name once (etcd's "started").
	started bool
	// silent: it runs, but its client port does not serve yet
	// (PublishLate).
	silent bool
	// clientCut: its client port drops every packet (a firewall rule, a
	// broken route from the operator): calls to it time out and a client
	// fails over to its other endpoints, while its peers and its /health
	// listener still work (CutClients).
	clientCut bool
	// connectedAt is when its links to the peers came up; zero while down.
	connectedAt time.Time
	// caughtUp: its applied index follows the leader's.
	caughtUp bool
	// term is the last term the member saw: the cluster's while it is
	// connected, the one it was cut off in otherwise (pre-vote keeps a
	// member cut off from raising its own).
	term    uint64
	version string
	// logFrom is the minor of the oldest etcd that wrote entries the
	// member would replay on a restart (those after its last snapshot).
	logFrom int
	// dbSize is the backend file's size, dbInUse the part of it in use;
	// defrags counts defragmentations, defragFailures the ones still to
	// fail (FailDefragment).
	dbSize, dbInUse int64
	defrags         int
	defragFailures  int
}

// New returns an empty fake cluster with the given cluster ID. The clock
// times etcd's health interval; nil means the real clock.
func New(clusterID uint64, clk clock.PassiveClock) *Cluster {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Cluster{
		clock: clk, clusterID: clusterID, MaxLearners: 1,
		// Member IDs are random 64-bit numbers, as etcd's are.
		rng:     rand.New(rand.NewPCG(clusterID, 0x5eed)),
		members: map[uint64]*member{},
		alarms:  map[uint64]string{},
	}
}

// DefaultVersion is the etcd version a member runs when none is given.
const DefaultVersion = "3.6.16"

// Bootstrap adds a started, connected voter, as a seed forming the cluster.
func (c *Cluster) Bootstrap(name, peerURL, clientURL string) uint64 {
	return c.BootstrapVersion(name, peerURL, clientURL, DefaultVersion)
}

// BootstrapVersion is Bootstrap with the seed running the given version.
func (c *Cluster) BootstrapVersion(name, peerURL, clientURL, version string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.newID()
	c.members[id] = &member{
		Member:  etcd.Member{ID: id, Name: name, PeerURLs: []string{peerURL}, ClientURLs: []string{clientURL}},
		running: true, started: true, caughtUp: true, version: version, connectedAt: c.clock.Now(),
		logFrom: minor(version), dbSize: newBackend, dbInUse: newBackend,
	}
	if c.clusterVersion == "" {
		c.clusterVersion = majorMinor(version)
	}
	c.commit++
	c.elect()
	return id
}

// ClusterID is the cluster's ID.
func (c *Cluster) ClusterID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterID
}

// Rebuild starts the cluster over as a restore of a snapshot does: a new
// cluster ID and no member, for the restored seed to bootstrap. It refuses
// while a member still runs: that member would go on serving the old
// cluster beside the new one.
func (c *Cluster) Rebuild(clusterID uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.running {
			return fmt.Errorf("member %s still runs the old cluster", m.Name)
		}
	}
	c.clusterID, c.members, c.alarms, c.clusterVersion = clusterID, map[uint64]*member{}, map[uint64]string{}, ""
	return nil
}

// Start starts the process of the member with this peer URL, running the
// default version (see StartVersion).
func (c *Cluster) Start(peerURL, name, clientURL string) error {
	return c.StartVersion(peerURL, name, clientURL, DefaultVersion)
}

// StartVersion starts the process of the member with this peer URL running
// the given etcd version: it publishes its name and client URL and connects
// to its peers. A learner catches up separately (CatchUp). etcd refuses to
// start a member the cluster does not list, one older than the cluster
// version (unless a downgrade to its minor is under way), and one more than a
// minor newer.
func (c *Cluster) StartVersion(peerURL, name, clientURL, version string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPeer(peerURL)
	if m == nil {
		return fmt.Errorf("fake: member with peer URL %s is not in the cluster", peerURL)
	}
	if m.running {
		return nil
	}
	if err := c.mayRun(m, version); err != nil {
		return err
	}
	if m.logFrom == 0 {
		// A new member receives the leader's log.
		m.logFrom = c.oldestLog()
	}
	if minor(version) >= 7 && m.logFrom > 0 && m.logFrom <= 5 {
		return fmt.Errorf("fake: panic: unmarshal should never fail (%s cannot replay the 3.%d raft log entries after its last snapshot)", version, m.logFrom)
	}
	fresh := !m.started
	m.Name, m.ClientURLs, m.running, m.started, m.version = name, []string{clientURL}, true, true, version
	m.silent = c.PublishLate && fresh && m.IsLearner
	if !m.isolated {
		m.connectedAt = c.clock.Now()
	}
	if !m.IsLearner {
		m.caughtUp = true
	}
	c.elect()
	c.finishDowngrade()
	c.decideClusterVersion()
	return nil
}

// ForceNewCluster starts the process of the member with this peer URL as
// etcd's --force-new-cluster does: the member keeps its ID, the cluster ID
// and its data, every other member (voter or learner) is removed from the
// membership, and it leads alone in a new term. etcd refuses it for a member
// it has no data of (the fake: one the membership does not list).
func (c *Cluster) ForceNewCluster(peerURL, name, clientURL, version string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPeer(peerURL)
	if m == nil {
		return fmt.Errorf("fake: member with peer URL %s has no data to force a new cluster from", peerURL)
	}
	if m.running {
		return fmt.Errorf("fake: member with peer URL %s already runs", peerURL)
	}
	if m.IsLearner {
		return fmt.Errorf("fake: a learner cannot force a new cluster")
	}
	if err := c.mayRun(m, version); err != nil {
		return err
	}
	for id := range c.members {
		if id != m.ID {
			delete(c.members, id)
			delete(c.alarms, id)
		}
	}
	m.Name, m.ClientURLs, m.running, m.started, m.version, m.caughtUp = name, []string{clientURL}, true, true, version, true
	m.isolated, m.connectedAt = false, c.clock.Now()
	c.commit++
	c.leader = 0
	c.elect()
	c.decideClusterVersion()
	return nil
}

// Snapshot makes the member take a snapshot, as a restart with
// --snapshot-count=1 does: it no longer replays older log entries.
func (c *Cluster) Snapshot(peerURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil && m.running {
		m.logFrom = minor(m.version)
	}
}

// oldestLog is the oldest log era among the started members.
func (c *Cluster) oldestLog() int {
	low := 0
	for _, m := range c.members {
		if m.started && m.logFrom > 0 && (low == 0 || m.logFrom < low) {
			low = m.logFrom
		}
	}
	return low
}

// decideClusterVersion raises the cluster version to the lowest minor the
// members run, when every started member runs (etcd's leader asks each).
func (c *Cluster) decideClusterVersion() {
	low := ""
	for _, m := range c.members {
		if !m.started {
			continue
		}
		if !m.running {
			return
		}
		if v := majorMinor(m.version); low == "" || minor(v+".0") < minor(low+".0") {
			low = v
		}
	}
	if low != "" && (c.clusterVersion == "" || minor(low+".0") > minor(c.clusterVersion+".0")) {
		c.clusterVersion = low
	}
}

// mayRun is etcd's check of a member's binary against the cluster version.
func (c *Cluster) mayRun(_ *member, version string) error {
	cluster := c.clusterVersionOf(nil)
	if cluster == "" {
		return nil
	}
	mine, cv := minor(version), minor(cluster+".0")
	switch {
	case mine < cv:
		return fmt.Errorf("fake: cluster cannot be downgraded (current version: %s is lower than determined cluster version: %s)", version, cluster)
	case mine > cv+1:
		return fmt.Errorf("fake: version %s is more than one minor newer than cluster version %s", version, cluster)
	}
	return nil
}

// ClusterVersion is the cluster version: the lowest minor the started
// members run, or the target of a downgrade under way.
func (c *Cluster) ClusterVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterVersionOf(nil)
}

func (c *Cluster) clusterVersionOf(*member) string {
	c.lowerIfDue()
	if c.downgrade != "" && c.lowered {
		return c.downgrade
	}
	return c.clusterVersion
}

// monitorInterval is how often etcd's leader revisits the cluster version.
const monitorInterval = 4 * time.Second

// lowerIfDue is etcd's version monitor after a downgrade was enabled: it
// sets the cluster version to the target on its next round, and only when
// every started member answers (it needs each one's version). A member
// restarted on the older minor before that cannot join, and with it down
// the version is never lowered.
func (c *Cluster) lowerIfDue() {
	if c.downgrade == "" || c.lowered || c.clock.Since(c.downgradeAt) < monitorInterval {
		return
	}
	for _, m := range c.members {
		if m.started && !m.running {
			return
		}
	}
	c.lowered = true
}

// finishDowngrade ends a downgrade once every member runs its target.
func (c *Cluster) finishDowngrade() {
	if c.downgrade == "" {
		return
	}
	for _, m := range c.members {
		if m.started && majorMinor(m.version) != c.downgrade {
			return
		}
	}
	c.clusterVersion, c.downgrade, c.lowered = c.downgrade, "", false
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// minor is the minor number of a major.minor.patch version.
func minor(v string) int {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return n
}

// Stop stops the member's process.
func (c *Cluster) Stop(peerURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.running, m.connectedAt = false, time.Time{}
		c.elect()
	}
}

// Publish ends a member's PublishLate state: it learns it has published
// itself and serves its clients.
func (c *Cluster) Publish(peerURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.silent = false
	}
}

// Publishing lists the peer URLs of the members that run and do not serve
// their clients yet (PublishLate).
func (c *Cluster) Publishing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.members {
		if m.silent && m.running {
			out = append(out, m.PeerURLs[0])
		}
	}
	slices.Sort(out)
	return out
}

// Isolate cuts a running member off from its peers (isolated true) or
// reconnects it. An isolated member still answers its clients, but nothing
// it serves can reach a quorum.
func (c *Cluster) Isolate(peerURL string, isolated bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPeer(peerURL)
	if m == nil || m.isolated == isolated {
		return
	}
	m.isolated = isolated
	m.connectedAt = time.Time{}
	if !isolated && m.running {
		m.connectedAt = c.clock.Now()
	}
	c.elect()
}

// CutClients drops (cut true) or lets through again the packets to the
// client port of the member with this peer URL, leaving its peer links and
// its /health listener alone: the member goes on serving raft, and leading
// if it led, while no client reaches it.
func (c *Cluster) CutClients(peerURL string, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.clientCut = cut
	}
}

// cutAt is the running member at this client URL whose client port drops
// every packet.
func (c *Cluster) cutAt(url string) *member {
	for _, m := range c.members {
		if m.running && m.clientCut && slices.Contains(m.ClientURLs, url) {
			return m
		}
	}
	return nil
}

// timedOut is the error of a call to a client port that drops packets.
func timedOut(endpoint string) error {
	return fmt.Errorf("fake: %s does not answer: %w", endpoint, context.DeadlineExceeded)
}

// CatchUp makes a running learner's applied index reach the leader's.
func (c *Cluster) CatchUp(peerURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil && c.connected(m) {
		m.caughtUp = true
	}
}

// Running reports whether the member with this peer URL runs and whether it
// has a leader, as its /health endpoint would.
func (c *Cluster) Running(peerURL string) (running, hasLeader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPeer(peerURL)
	if m == nil || !m.running {
		return false, false
	}
	return true, c.leaderSeenBy(m) != 0
}

// Members returns a copy of the membership, sorted by ID.
func (c *Cluster) Members() []etcd.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list()
}

// Leader returns the leader's ID, 0 without one.
func (c *Cluster) Leader() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// QuorumConnected reports whether a quorum of the voters is connected: the
// ground truth a test checks the operator against.
func (c *Cluster) QuorumConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hasQuorum()
}

// Dialer returns an etcd.Dialer whose clients talk to this cluster. Like the
// real client it connects lazily: a cluster that cannot be reached fails the
// first call, not the dial.
func (c *Cluster) Dialer() etcd.Dialer {
	return func(ctx context.Context, cfg etcd.Config) (etcd.Client, error) {
		c.mu.Lock()
		c.Dials++
		c.mu.Unlock()
		if len(cfg.Endpoints) == 0 {
			return nil, fmt.Errorf("fake: no endpoints")
		}
		f := &client{c: c, cfg: cfg}
		if cfg.Username != "" {
			// The real client logs in at dial, member by member.
			token, err := etcd.Login(ctx, cfg, func(_ context.Context, ep string) (string, error) { return c.authenticate(cfg, ep) })
			if err != nil {
				return nil, err
			}
			f.token = token
		}
		return f, nil
	}
}

// authenticate logs a user in through one member as etcd does: through
// raft, so a learner refuses and a member without a leader times out.
func (c *Cluster) authenticate(cfg etcd.Config, endpoint string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byClient(endpoint)
	switch {
	case m == nil && c.cutAt(endpoint) != nil:
		return "", timedOut(endpoint)
	case m == nil:
		return "", fmt.Errorf("fake: dial %s: connection refused", endpoint)
	case m.IsLearner:
		return "", errors.New("etcdserver: rpc not supported for learner")
	case !c.AuthOn:
		return "", nil
	case c.leaderSeenBy(m) == 0:
		return "", fmt.Errorf("fake: %s cannot reach a quorum: %w", m.Name, context.DeadlineExceeded)
	case cfg.Username != "root" || cfg.Password != c.RootPassword:
		return "", errors.New("etcdserver: authentication failed, invalid user ID or password")
	}
	return c.currentToken(), nil
}

func (c *Cluster) currentToken() string { return fmt.Sprintf("token-%d", c.authRevision) }

func (c *Cluster) newID() uint64 {
	for {
		id := c.rng.Uint64()
		if _, taken := c.members[id]; id != 0 && !taken {
			return id
		}
	}
}

func (c *Cluster) list() []etcd.Member {
	out := make([]etcd.Member, 0, len(c.members))
	for _, m := range c.members {
		cp := m.Member
		cp.PeerURLs = slices.Clone(m.PeerURLs)
		cp.ClientURLs = slices.Clone(m.ClientURLs)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b etcd.Member) int { return cmp.Compare(a.ID, b.ID) })
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
		if m.running && !m.silent && !m.clientCut && slices.Contains(m.ClientURLs, url) {
			return m
		}
	}
	return nil
}

// silentAt is the running member at this client URL that does not serve
// its clients yet.
func (c *Cluster) silentAt(url string) *member {
	for _, m := range c.members {
		if m.running && m.silent && slices.Contains(m.ClientURLs, url) {
			return m
		}
	}
	return nil
}

func (c *Cluster) connected(m *member) bool { return m.running && !m.isolated }

// connectedFor reports whether the member has been connected for etcd's
// health interval.
func (c *Cluster) connectedFor(m *member) bool {
	return c.connected(m) && !m.connectedAt.After(c.clock.Now().Add(-HealthInterval))
}

func (c *Cluster) voters() []*member {
	var out []*member
	for _, m := range c.members {
		if !m.IsLearner {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (c *Cluster) hasQuorum() bool {
	voters, up := c.voters(), 0
	for _, m := range voters {
		if c.connected(m) {
			up++
		}
	}
	return len(voters) > 0 && up > len(voters)/2
}

// elect keeps a connected leader while a quorum is connected, or elects the
// connected voter with the lowest ID; without a quorum there is no leader.
func (c *Cluster) elect() {
	defer c.syncTerms()
	if !c.hasQuorum() {
		c.leader = 0
		return
	}
	if l := c.members[c.leader]; l != nil && !l.IsLearner && c.connected(l) {
		return
	}
	c.leader = 0
	for _, m := range c.voters() {
		if c.connected(m) {
			c.setLeader(m.ID)
			return
		}
	}
}

// setLeader hands leadership to id in a new term.
func (c *Cluster) setLeader(id uint64) {
	c.leader = id
	c.term++
}

// syncTerms brings every connected member to the cluster's term.
func (c *Cluster) syncTerms() {
	for _, m := range c.members {
		if c.connected(m) && c.leader != 0 {
			m.term = c.term
		}
	}
}

// RaiseAlarm raises an alarm (AlarmNoSpace, say) on the member with this
// peer URL, as etcd does when its backend reaches the quota.
func (c *Cluster) RaiseAlarm(peerURL, typ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		c.alarms[m.ID] = typ
	}
}

// DisarmAlarms clears every alarm.
func (c *Cluster) DisarmAlarms() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.alarms)
}

// Alarms lists the alarm types raised, each once.
func (c *Cluster) Alarms() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, typ := range c.alarms {
		if !slices.Contains(out, typ) {
			out = append(out, typ)
		}
	}
	slices.Sort(out)
	return out
}

// leaderSeenBy is the leader as one member sees it: none when it is cut off.
func (c *Cluster) leaderSeenBy(m *member) uint64 {
	if !c.connected(m) {
		return 0
	}
	return c.leader
}

// String describes the membership, for test failure messages.
func (c *Cluster) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, m := range c.list() {
		s := c.members[m.ID]
		fmt.Fprintf(&b, "%016x %s learner=%t running=%t isolated=%t started=%t caughtUp=%t leader=%t %v\n",
			m.ID, m.Name, m.IsLearner, s.running, s.isolated, s.started, s.caughtUp, m.ID == c.leader, m.PeerURLs)
	}
	return b.String()
}

// AskedRemoved returns the client URLs a status call reached after their
// member was removed: each would have crashed a real etcd 3.6.
func (c *Cluster) AskedRemoved() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.askedRemoved)
}
