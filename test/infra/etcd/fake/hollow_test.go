package fake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// A member whose client port drops packets (CutClients) answers nothing:
// every call through the real client waits for its deadline, as it would
// against a firewalled etcd, and is neither refused nor failed at once;
// its /health, on the metrics port, still answers. Cut no more, it serves.
func TestHollowCutClientsWaitForTheDeadline(t *testing.T) {
	n := time.Now().UnixNano()
	ip := fmt.Sprintf("127.%d.%d.1", 64+n%128, (n/128)%256)
	h := NewHollow(New(0xc1a5, nil))
	t.Cleanup(h.Close)
	m := HollowMember{Name: "m0", PeerURL: "http://" + ip + ":2380", ClientURL: "http://" + ip + ":2379", Addr: ip, MetricsPort: 2381}
	if err := h.Bootstrap(m); err != nil {
		t.Fatal(err)
	}
	cl, err := etcd.Dial(context.Background(), etcd.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := cl.MemberList(ctx)
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	h.Cluster().CutClients(m.PeerURL, true)
	if err := call(); err == nil || etcd.Unreachable(err) || !isDeadline(err) {
		t.Errorf("a cut member's answer: %v; want the call's deadline", err)
	}
	if !h.Healthy("m0") {
		t.Error("/health of a cut member does not answer")
	}
	h.Cluster().CutClients(m.PeerURL, false)
	if err := call(); err != nil {
		t.Errorf("after the cut: %v", err)
	}
}

func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "DeadlineExceeded") || strings.Contains(err.Error(), "deadline exceeded")
}
