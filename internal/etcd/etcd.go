// Package etcd is the operator's narrow view of an etcd cluster: membership,
// per-member status, and the auth calls it needs. The real implementation wraps
// clientv3; tests use the fake in package etcd/fake.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Member is one etcd member as etcd lists it.
type Member struct {
	ID         uint64
	Name       string // empty until the member has started
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// MemberList is the membership as seen by one member, with the cluster ID from
// the response header.
type MemberList struct {
	ClusterID uint64
	Members   []Member
}

// Status is what one member reports about itself (Maintenance Status RPC).
type Status struct {
	ClusterID        uint64
	MemberID         uint64
	Leader           uint64
	RaftIndex        uint64
	RaftTerm         uint64
	RaftAppliedIndex uint64
	IsLearner        bool
	Version          string
	DBSize           int64
	DBSizeInUse      int64
	// Errors are the member's own report of what is wrong: no leader, and
	// every alarm raised in the cluster (etcd lists them there too).
	Errors []string
	// DowngradeTarget is the version a downgrade in progress goes to (etcd
	// 3.6 and later), empty when none is.
	DowngradeTarget string
}

// Alarm types etcd raises.
const (
	// AlarmNoSpace: a member's backend reached its quota; etcd refuses
	// writes (reads and membership changes still work) until the alarm is
	// disarmed after space was freed.
	AlarmNoSpace = "NOSPACE"
	// AlarmCorrupt: a member's data disagrees with the others'.
	AlarmCorrupt = "CORRUPT"
)

// Alarms lists the alarm types the member reports in its status errors
// (etcd renders each alarm there as "memberID:<id> alarm:<type>").
func (s *Status) Alarms() []string {
	var out []string
	for _, e := range s.Errors {
		for _, typ := range []string{AlarmNoSpace, AlarmCorrupt} {
			if strings.Contains(e, "alarm:"+typ) && !slices.Contains(out, typ) {
				out = append(out, typ)
			}
		}
	}
	return out
}

// DowngradeAction is one step of etcd's downgrade API (3.6 and later).
type DowngradeAction int

// The downgrade steps.
const (
	DowngradeValidate DowngradeAction = iota
	DowngradeEnable
	DowngradeCancel
)

// Client is every etcd call the operator makes.
type Client interface {
	MemberList(ctx context.Context) (*MemberList, error)
	// MemberAddAsLearner adds a learner and returns it with the membership
	// after the change.
	MemberAddAsLearner(ctx context.Context, peerURLs []string) (*Member, error)
	MemberPromote(ctx context.Context, id uint64) error
	MemberRemove(ctx context.Context, id uint64) error
	// Status asks one endpoint (a client URL) about itself.
	Status(ctx context.Context, endpoint string) (*Status, error)
	// ClusterVersion returns etcd's cluster version (major.minor: the
	// lowest every member runs, or a downgrade's target) as the member at
	// the endpoint (a client URL) knows it.
	ClusterVersion(ctx context.Context, endpoint string) (string, error)
	// Health asks a member's /health document at url (on its metrics
	// listener, plain HTTP) and returns nil when etcd says it is healthy:
	// the member knows a leader and a linearizable read through it
	// succeeded. etcd serves it before the member has published itself
	// through raft, when its client port does not answer yet.
	Health(ctx context.Context, url string) error
	// Downgrade validates, enables or cancels a downgrade of the cluster
	// version to the minor of version, and returns the cluster version.
	Downgrade(ctx context.Context, action DowngradeAction, version string) (string, error)
	// MoveLeader asks the leader to hand its leadership to the transferee.
	// etcd accepts it only from the leader itself: the client must be
	// dialled to the leader's endpoint alone, or it gets ErrNotLeader.
	MoveLeader(ctx context.Context, transferee uint64) error

	// Defragment rewrites the backend file of the member at the endpoint (a
	// client URL) alone, blocking that member while it runs. Repeating it
	// is harmless.
	Defragment(ctx context.Context, endpoint string) error
	// AlarmList lists the alarms raised in the cluster.
	AlarmList(ctx context.Context) ([]Alarm, error)
	// AlarmDisarm clears one alarm, or every alarm when the zero Alarm is
	// given, and returns the alarms it cleared.
	AlarmDisarm(ctx context.Context, a Alarm) ([]Alarm, error)

	// AuthEnabled reports whether etcd checks credentials (an anonymous
	// client refused counts as yes).
	AuthEnabled(ctx context.Context) (bool, error)
	// EnableRootAuth creates (or resets the password of) the user root
	// with the root role, then turns authentication on.
	EnableRootAuth(ctx context.Context, password string) error
	// ChangeRootPassword sets root's password; the client must be root.
	ChangeRootPassword(ctx context.Context, password string) error

	Close() error
}

// Config says how to reach a cluster.
type Config struct {
	Endpoints []string
	TLS       *tls.Config
	Username  string
	Password  string
	// LoginVia are the endpoints to log in through before Endpoints (see
	// Login): the voters, since a learner refuses to log anyone in.
	LoginVia []string
	// DialTimeout bounds connection establishment; 5s when zero.
	DialTimeout time.Duration
	// Resolve, if set, maps a member's host name to its address before DNS
	// is asked. Cluster DNS (and each resolver's cache of it) learns about a
	// new Pod seconds after the operator does; a Pod's own status knows its
	// IP at once. A host it knows with an empty address is not dialed (see
	// ResolvingDialer).
	Resolve func(host string) (string, bool)
}

// ErrNoAddressYet: the member's Pod has no address yet, so it was not
// dialed (nor its name looked up).
var ErrNoAddressYet = errors.New("the member's Pod has no address yet")

// Unreachable reports whether a call failed because nothing serves at the
// member's address: its Pod has none yet, or its port refused the
// connection (its etcd does not run). Any other failure (a timeout, a
// member that accepts connections but does not serve yet) is not this.
func Unreachable(err error) bool {
	return errors.Is(err, ErrNoAddressYet) || errors.Is(err, syscall.ECONNREFUSED)
}

// Silent reports whether a call got no answer at all: nothing serves at the
// address, or the member did not answer before the call's deadline. A
// member that answered with an error (refused credentials, not ready) is
// not silent.
func Silent(err error) bool {
	return Unreachable(err) || errors.Is(err, context.DeadlineExceeded)
}

// Dialer opens a Client. The controllers receive one so tests can inject the
// fake.
type Dialer func(ctx context.Context, cfg Config) (Client, error)

// Errors the controllers tell apart. The real client maps etcd's errors onto
// them; the fake returns them directly.
var (
	// ErrUnhealthy: etcd refused a membership change because not every voter
	// has been connected long enough (its strict reconfiguration check).
	ErrUnhealthy = errors.New("etcd: cluster not healthy enough for a membership change")
	// ErrLearnerNotReady: the learner has not caught up with the leader.
	ErrLearnerNotReady = errors.New("etcd: learner not in sync with the leader")
	// ErrNotHealthy: a member's /health says it is not healthy (no leader,
	// or its linearizable read failed).
	ErrNotHealthy = errors.New("etcd: member not healthy")
	// ErrMemberNotFound: no member with that ID.
	ErrMemberNotFound = errors.New("etcd: member not found")
	// ErrTooManyLearners: etcd allows one learner at a time.
	ErrTooManyLearners = errors.New("etcd: too many learner members")
	// ErrPeerURLExists: a member with that peer URL is already listed.
	ErrPeerURLExists = errors.New("etcd: peer URL already exists")
	// ErrMemberNotLearner: only a learner can be promoted.
	ErrMemberNotLearner = errors.New("etcd: member is not a learner")
	// ErrNotLeader: the request must be sent to the leader.
	ErrNotLeader = errors.New("etcd: not the leader")
	// ErrBadTransferee: leadership can only move to a started voter.
	ErrBadTransferee = errors.New("etcd: bad leader transferee")
	// ErrAuthRequired: auth is on and no (valid) user was given.
	ErrAuthRequired = errors.New("etcd: authentication required")
	// ErrAuthFailed: the credentials were rejected.
	ErrAuthFailed = errors.New("etcd: authentication failed")
	// ErrAuthTokenInvalid: the member does not know the token (yet: a
	// learner that has not applied the login). It is an ErrAuthFailed.
	ErrAuthTokenInvalid = fmt.Errorf("%w: invalid auth token", ErrAuthFailed)
)

// FormatID renders a member or cluster ID the way the API stores it.
func FormatID(id uint64) string { return fmt.Sprintf("%016x", id) }

// ParseID parses an ID rendered by FormatID; 0 for an empty string.
func ParseID(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	var id uint64
	if _, err := fmt.Sscanf(s, "%x", &id); err != nil {
		return 0, fmt.Errorf("bad etcd ID %q: %w", s, err)
	}
	return id, nil
}

// Classify maps an etcd client error onto this package's errors (for
// callers outside it that use clientv3 directly).
func Classify(err error) error { return classify(err) }

// classify maps an error message from etcd to one of the sentinel errors, so
// controllers never match strings themselves.
func classify(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, c := range []struct {
		substr string
		as     error
	}{
		{"unhealthy cluster", ErrUnhealthy},
		{"re-configuration failed due to not enough started members", ErrUnhealthy},
		{"can only promote a learner member which is in sync with leader", ErrLearnerNotReady},
		{"member not found", ErrMemberNotFound},
		{"too many learner members in cluster", ErrTooManyLearners},
		{"Peer URLs already exists", ErrPeerURLExists},
		// etcd derives a new member's ID from its peer URLs and the second
		// of the request: the same URL added twice within a second collides
		// on the ID before the URL is checked.
		{"member ID already exist", ErrPeerURLExists},
		{"can only promote a learner member", ErrMemberNotLearner},
		{"etcdserver: not leader", ErrNotLeader},
		{"bad leader transferee", ErrBadTransferee},
		{"user name is empty", ErrAuthRequired},
		{"permission denied", ErrAuthRequired},
		{"insufficient credentials", ErrAuthRequired},
		// With mutual TLS and no user given, etcd takes the client
		// certificate's common name for the user; it may be no user.
		{"user name not found", ErrAuthRequired},
		{"authentication failed", ErrAuthFailed},
		{"rpc not supported for learner", ErrLearnerRefused},
		{"invalid auth token", ErrAuthTokenInvalid},
	} {
		if strings.Contains(msg, c.substr) {
			return fmt.Errorf("%w: %s", c.as, msg)
		}
	}
	return err
}
