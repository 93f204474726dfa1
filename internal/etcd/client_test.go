package etcd

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A host the resolver knows without an address is refused before any DNS
// lookup or connection; one it does not know is dialed by name.
func TestResolvingDialer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	known := map[string]string{"ready.c.ns.svc": "127.0.0.1", "starting.c.ns.svc": ""}
	dial := ResolvingDialer(func(host string) (string, bool) {
		ip, ok := known[host]
		return ip, ok
	})
	conn, err := dial(context.Background(), net.JoinHostPort("ready.c.ns.svc", port))
	if err != nil {
		t.Fatalf("dialing a member with an address: %v", err)
	}
	_ = conn.Close()
	if _, err := dial(context.Background(), net.JoinHostPort("starting.c.ns.svc", port)); !errors.Is(err, ErrNoAddressYet) {
		t.Errorf("dialing a member without an address: %v, want %v", err, ErrNoAddressYet)
	}
	conn, err = dial(context.Background(), net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("dialing a host the resolver does not know: %v", err)
	}
	_ = conn.Close()
}

// A member whose etcd does not run is reported at once, whatever the
// caller's deadline: clientv3 alone waits for a connection until the
// context ends, which cost every pass that asked such a member its whole
// status timeout. A member whose Pod has no address yet is not dialed.
func TestStatusOfAMemberThatDoesNotRun(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	known := map[string]string{"stopped.c.ns.svc": "127.0.0.1", "starting.c.ns.svc": ""}
	cfg := Config{
		Endpoints: []string{"http://stopped.c.ns.svc:" + port, "http://starting.c.ns.svc:" + port},
		Resolve: func(host string) (string, bool) {
			ip, ok := known[host]
			return ip, ok
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Status(ctx, cfg.Endpoints[0]); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("status of a member whose port refuses: %v, want connection refused", err)
	}
	if _, err := c.Status(ctx, cfg.Endpoints[1]); !errors.Is(err, ErrNoAddressYet) {
		t.Errorf("status of a member without an address: %v, want %v", err, ErrNoAddressYet)
	}
	if ctx.Err() != nil {
		t.Errorf("the calls waited for the caller's deadline")
	}
}
