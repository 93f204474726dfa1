package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// listRecorder records the endpoints each membership read was dialed to.
type listRecorder struct {
	etcd.Client
	dialed [][]string
}

func (l *listRecorder) dial(_ context.Context, cfg etcd.Config) (etcd.Client, error) {
	l.dialed = append(l.dialed, cfg.Endpoints)
	return l, nil
}

func (l *listRecorder) MemberList(context.Context) (*etcd.MemberList, error) {
	return &etcd.MemberList{ClusterID: 0xc1}, nil
}

func (l *listRecorder) Close() error { return nil }

// The membership is not read through members where nothing serves (their
// Pod has no address yet, or their port refused the status call): clientv3
// would wait for a connection to them until the call's deadline, which held
// a new cluster's pass for 5 s while its seed's Pod was being made, and the
// pass that would have seen the seed Ready with it.
func TestMembershipIsNotReadThroughUnreachableMembers(t *testing.T) {
	refused := fmt.Errorf("connecting: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	for _, tc := range []struct {
		name string
		errs map[string]error
		want [][]string
	}{
		{"none can be reached", map[string]error{"m0": refused, "m1": fmt.Errorf("m1: %w", etcd.ErrNoAddressYet)}, nil},
		{"one timed out", map[string]error{"m0": refused, "m1": context.DeadlineExceeded}, [][]string{{"m1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := healthyWorld(2)
			w.etcd.status, w.etcd.leader = map[string]*etcd.Status{}, nil
			w.etcd.statusErr = tc.errs
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(w.cluster).Build()
			l := &listRecorder{}
			r := &Reconciler{Client: c, APIReader: c, Dial: l.dial}
			r.readMembership(context.Background(), w, w.inEtcd())
			want := clientURLs(w, tc.want)
			if !slices.EqualFunc(l.dialed, want, slices.Equal) {
				t.Errorf("the membership read was dialed to %v, want %v", l.dialed, want)
			}
			if tc.want == nil && (w.etcd.err == nil || !etcd.Unreachable(w.etcd.err)) {
				t.Errorf("etcd error %v, want the members' being unreachable", w.etcd.err)
			}
			if tc.want != nil && (w.etcd.err != nil || w.etcd.list == nil) {
				t.Errorf("membership %v, error %v: want it read", w.etcd.list, w.etcd.err)
			}
		})
	}
}

// clientURLs maps each list of member names to their client URLs.
func clientURLs(w *world, lists [][]string) [][]string {
	var out [][]string
	for _, names := range lists {
		var eps []string
		for _, n := range names {
			eps = append(eps, manifest.ClientURL(member(w, n)))
		}
		out = append(out, eps)
	}
	return out
}

// silentClient answers no status call: each fails with the error set for
// its endpoint. It records the membership reads.
type silentClient struct {
	listRecorder
	errs  map[string]error
	lists int
}

func (s *silentClient) dial(context.Context, etcd.Config) (etcd.Client, error) { return s, nil }

func (s *silentClient) Status(_ context.Context, endpoint string) (*etcd.Status, error) {
	return nil, s.errs[endpoint]
}

func (s *silentClient) MemberList(ctx context.Context) (*etcd.MemberList, error) {
	s.lists++
	return s.listRecorder.MemberList(ctx)
}

// A cluster none of whose members answers its status call is not asked its
// membership too: that read only waits for its own timeout (5 s), holding a
// worker that healthy clusters wait for. The scale bench showed a healthy
// cluster's change waiting 7 s behind one cluster in ten gone silent. A
// member that answers with a refusal (credentials) is not silent: the
// membership read says why again, and the pass reports it.
func TestSilentClusterIsNotAskedItsMembership(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errs      []error
		wantLists int
	}{
		{"every member timed out", []error{context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded}, 0},
		{"timed out or refused", []error{context.DeadlineExceeded, fmt.Errorf("connecting: %w", syscall.ECONNREFUSED), context.DeadlineExceeded}, 0},
		{"one refuses the credentials", []error{context.DeadlineExceeded, etcd.ErrAuthFailed, context.DeadlineExceeded}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := healthyWorld(3)
			w.etcd.list = nil
			s := &silentClient{errs: map[string]error{}}
			for i, m := range w.inEtcd() {
				s.errs[manifest.ClientURL(m)] = tc.errs[i]
			}
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(w.cluster).Build()
			r := &Reconciler{Client: c, APIReader: c, Dial: s.dial}
			r.readEtcd(context.Background(), w)
			if s.lists != tc.wantLists {
				t.Errorf("the membership was read %d times, want %d", s.lists, tc.wantLists)
			}
			if tc.wantLists == 0 && (w.etcd.err == nil || !etcd.Silent(w.etcd.err) || w.etcd.list != nil) {
				t.Errorf("etcd error %v, membership %v: want no membership and the members' silence", w.etcd.err, w.etcd.list)
			}
			if tc.wantLists == 0 {
				again := healthyWorld(3)
				again.etcd.list = nil
				r.readEtcd(context.Background(), again)
				if again.etcd.err == nil || w.etcd.err == nil || again.etcd.err.Error() != w.etcd.err.Error() {
					t.Errorf("the error changed from pass to pass: %q, then %q", w.etcd.err, again.etcd.err)
				}
			}
		})
	}
}

// A cluster none of whose members answers is asked again after 5 s at
// first, then after half as long as it has been unavailable, at most the
// health poll's 30 s: tried every 5 s, a hundred such clusters kept every
// worker busy at 1,000 clusters. A cluster whose members answer with an
// error is asked at the usual pace.
func TestUnreachableClusterIsAskedLessAndLess(t *testing.T) {
	for _, tc := range []struct {
		name        string
		unavailable time.Duration // 0: Available
		err         error
		want        time.Duration
	}{
		{"just unavailable", 2 * time.Second, context.DeadlineExceeded, unreachableRetry},
		{"unavailable for 20 s", 20 * time.Second, context.DeadlineExceeded, 10 * time.Second},
		{"unavailable for 5 min", 5 * time.Minute, context.DeadlineExceeded, healthPoll},
		{"was available", 0, context.DeadlineExceeded, unreachableRetry},
		{"answering with an error", 5 * time.Minute, etcd.ErrAuthFailed, unreachableRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := healthyWorld(3)
			w.etcd.list, w.etcd.err = nil, fmt.Errorf("no member answered its status call (m0: %w)", tc.err)
			w.etcd.status, w.etcd.leader = map[string]*etcd.Status{}, nil
			status := metav1.ConditionTrue
			if tc.unavailable > 0 {
				status = metav1.ConditionFalse
			}
			w.original.Status.Conditions = []metav1.Condition{{Type: conditions.Available, Status: status,
				LastTransitionTime: metav1.NewTime(w.now.Add(-tc.unavailable))}}
			p := decide(w)
			if p.change != nil || p.requeue != tc.want {
				t.Errorf("plan %v, requeue %v; want no change and %v", p.change, p.requeue, tc.want)
			}
		})
	}
}
