// Package faults injects operator crashes for tests: with
// ETCD_OPERATOR_FAULT_RESTARTS=N the operator ends each of its first N lives
// right after the first API write or etcd change (membership, leadership,
// defragmentation, alarm disarm) of that life and
// starts a new one, with nothing carried over but what the API server and etcd
// hold. That is a crash between two API calls at every step of whatever the
// operator is doing, without waiting for a kubelet's restart back-off.
package faults

import (
	"context"
	"errors"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// EnvRestarts names the environment variable that turns injection on.
const EnvRestarts = "ETCD_OPERATOR_FAULT_RESTARTS"

// ErrDead is returned by every call after the injected crash.
var ErrDead = errors.New("fault injection: this operator life has ended")

// Life is one operator life that ends after a number of mutations. A nil
// *Life injects nothing.
type Life struct {
	mu        sync.Mutex
	dead      bool
	remaining int
	onEnd     func()
}

// NewLife starts a life that ends (calling onEnd, if set) right after its
// mutations-th successful mutation.
func NewLife(mutations int, onEnd func()) *Life {
	return &Life{remaining: mutations, onEnd: onEnd}
}

// Ended reports whether the life ended by injection.
func (l *Life) Ended() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// call runs one API or etcd call; a successful mutation ends the life.
func (l *Life) call(mutating bool, fn func() error) error {
	if l == nil {
		return fn()
	}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return ErrDead
	}
	l.mu.Unlock()
	err := fn()
	if err != nil || !mutating {
		return err
	}
	l.mu.Lock()
	l.remaining--
	ending := !l.dead && l.remaining <= 0
	if ending {
		l.dead = true
	}
	l.mu.Unlock()
	if ending && l.onEnd != nil {
		l.onEnd()
	}
	return nil
}

// Client wraps a Kubernetes client so that its writes count.
func (l *Life) Client(c client.WithWatch) client.WithWatch {
	if l == nil {
		return c
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return l.call(false, func() error { return c.Get(ctx, key, obj, opts...) })
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return l.call(false, func() error { return c.List(ctx, list, opts...) })
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return l.call(true, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return l.call(true, func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return l.call(true, func() error { return c.Patch(ctx, obj, patch, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return l.call(true, func() error { return c.Delete(ctx, obj, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			// An eviction, say: it deletes a Pod.
			return l.call(true, func() error { return c.SubResource(sub).Create(ctx, obj, subObj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return l.call(true, func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return l.call(true, func() error { return c.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
	})
}

// Dialer wraps an etcd dialer so that membership changes count.
func (l *Life) Dialer(d etcd.Dialer) etcd.Dialer {
	if l == nil {
		return d
	}
	return func(ctx context.Context, cfg etcd.Config) (etcd.Client, error) {
		var c etcd.Client
		err := l.call(false, func() error {
			var err error
			c, err = d(ctx, cfg)
			return err
		})
		if err != nil {
			return nil, err
		}
		return &etcdClient{Client: c, l: l}, nil
	}
}

type etcdClient struct {
	etcd.Client
	l *Life
}

func (c *etcdClient) MemberAddAsLearner(ctx context.Context, urls []string) (*etcd.Member, error) {
	var m *etcd.Member
	err := c.l.call(true, func() error {
		var err error
		m, err = c.Client.MemberAddAsLearner(ctx, urls)
		return err
	})
	return m, err
}

func (c *etcdClient) MemberPromote(ctx context.Context, id uint64) error {
	return c.l.call(true, func() error { return c.Client.MemberPromote(ctx, id) })
}

func (c *etcdClient) MemberRemove(ctx context.Context, id uint64) error {
	return c.l.call(true, func() error { return c.Client.MemberRemove(ctx, id) })
}

func (c *etcdClient) MoveLeader(ctx context.Context, transferee uint64) error {
	return c.l.call(true, func() error { return c.Client.MoveLeader(ctx, transferee) })
}

func (c *etcdClient) Downgrade(ctx context.Context, action etcd.DowngradeAction, version string) (string, error) {
	var out string
	err := c.l.call(action != etcd.DowngradeValidate, func() error {
		var err error
		out, err = c.Client.Downgrade(ctx, action, version)
		return err
	})
	return out, err
}

func (c *etcdClient) EnableRootAuth(ctx context.Context, password string) error {
	return c.l.call(true, func() error { return c.Client.EnableRootAuth(ctx, password) })
}

func (c *etcdClient) ChangeRootPassword(ctx context.Context, password string) error {
	return c.l.call(true, func() error { return c.Client.ChangeRootPassword(ctx, password) })
}

func (c *etcdClient) MemberList(ctx context.Context) (*etcd.MemberList, error) {
	var out *etcd.MemberList
	err := c.l.call(false, func() error {
		var err error
		out, err = c.Client.MemberList(ctx)
		return err
	})
	return out, err
}

func (c *etcdClient) Status(ctx context.Context, endpoint string) (*etcd.Status, error) {
	var out *etcd.Status
	err := c.l.call(false, func() error {
		var err error
		out, err = c.Client.Status(ctx, endpoint)
		return err
	})
	return out, err
}

func (c *etcdClient) Defragment(ctx context.Context, endpoint string) error {
	return c.l.call(true, func() error { return c.Client.Defragment(ctx, endpoint) })
}

func (c *etcdClient) AlarmList(ctx context.Context) ([]etcd.Alarm, error) {
	var out []etcd.Alarm
	err := c.l.call(false, func() error {
		var err error
		out, err = c.Client.AlarmList(ctx)
		return err
	})
	return out, err
}

func (c *etcdClient) AlarmDisarm(ctx context.Context, a etcd.Alarm) ([]etcd.Alarm, error) {
	var out []etcd.Alarm
	err := c.l.call(true, func() error {
		var err error
		out, err = c.Client.AlarmDisarm(ctx, a)
		return err
	})
	return out, err
}
