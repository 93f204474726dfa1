package join

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func TestWaitReturnsOnceAPeerListsTheMember(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/members" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < 3 {
			_, _ = w.Write([]byte(`[{"id":1,"peerURLs":["http://a:2380"]}]`))
			return
		}
		_, _ = w.Write([]byte(`[{"id":1,"peerURLs":["http://a:2380"]},{"id":2,"peerURLs":["http://me:2380"]}]`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var said []string
	cfg := Config{PeerURL: "http://me:2380", Peers: []string{"http://down.invalid:2380", srv.URL}}
	if err := Wait(ctx, cfg, func(s string) { said = append(said, s) }); err != nil {
		t.Fatal(err)
	}
	if asked.Load() < 3 || len(said) == 0 {
		t.Errorf("returned after %d answers, said %q", asked.Load(), said)
	}
}

func TestWaitGivesUpWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := Wait(ctx, Config{PeerURL: "http://me:2380", Peers: []string{"http://127.0.0.1:1"}}, func(string) {}); err == nil {
		t.Fatal("waited for a member no peer lists, and returned no error")
	}
}

// The peer /members document of a real etcd lists its members' peer URLs.
func TestRealEtcdPeerMembersDocument(t *testing.T) {
	peer, client := freeURL(t), freeURL(t)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "m0", filepath.Join(t.TempDir(), "m0")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = "m0=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Wait(ctx, Config{PeerURL: peer.String(), Peers: []string{peer.String()}}, func(string) {}); err != nil {
		t.Fatalf("etcd's own peer URL: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if err := Wait(short, Config{PeerURL: "http://other:2380", Peers: []string{peer.String()}}, func(string) {}); err == nil {
		t.Fatal("a peer URL etcd does not list was taken as a member")
	}
}

func freeURL(t *testing.T) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}
