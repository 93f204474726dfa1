package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
