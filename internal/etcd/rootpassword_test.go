package etcd_test

import (
	"context"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// rootPassworder is the part of the real client that etcd-migrate uses to
// give a legacy root user a password.
type rootPassworder interface {
	RootRoles(ctx context.Context) ([]string, error)
	GiveRootAPassword(ctx context.Context, password string, roles []string) error
}

// TestGiveRootAPassword runs against a real etcd server: root created
// without a password (as the legacy operator makes it) and holding a role
// besides root gets a password and keeps its roles, also when an earlier
// call died after deleting root, as long as the caller passes the roles it
// read before.
func TestGiveRootAPassword(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd servers take seconds; -short skips them")
	}
	c := newRealCluster(t)
	c.start(t, "m0")
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{c.clientURL("m0")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	ctx := ctxT(t)
	for _, step := range []func() error{
		func() error { _, err := raw.RoleAdd(ctx, "root"); return err },
		func() error { _, err := raw.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := raw.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		},
		func() error { _, err := raw.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := raw.UserGrantRole(ctx, "root", "reader"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	rp := c.client(t, "m0").(rootPassworder)
	roles, err := rp.RootRoles(ctx)
	if err != nil || !slices.Equal(roles, []string{"reader", "root"}) {
		t.Fatalf("root's roles: %v, %v", roles, err)
	}

	// A call that died after deleting root (authentication is off then).
	if _, err := raw.UserDelete(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if err := rp.GiveRootAPassword(ctx, "pw", roles); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(t, "m0").MemberList(ctx); err == nil {
		t.Fatal("authentication is off after GiveRootAPassword")
	}
	asRoot, err := c.dial(t, etcd.Config{Endpoints: []string{"m0"}, Username: "root", Password: "pw"})
	if err != nil {
		t.Fatalf("logging in as root with the new password: %v", err)
	}
	rootRoles := func() []string {
		t.Helper()
		got, err := asRoot.(rootPassworder).RootRoles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := rootRoles(); !slices.Equal(got, []string{"reader", "root"}) {
		t.Errorf("after the finished call root holds %v, want [reader root]", got)
	}

	// Called again (a re-run), with authentication on and no roles passed:
	// root keeps what it holds.
	if err := asRoot.(rootPassworder).GiveRootAPassword(ctx, "pw", nil); err != nil {
		t.Fatal(err)
	}
	asRoot, err = c.dial(t, etcd.Config{Endpoints: []string{"m0"}, Username: "root", Password: "pw"})
	if err != nil {
		t.Fatalf("logging in as root after the second call: %v", err)
	}
	if got := rootRoles(); !slices.Equal(got, []string{"reader", "root"}) {
		t.Errorf("after a second call root holds %v, want [reader root]", got)
	}
}
