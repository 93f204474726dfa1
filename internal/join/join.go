// Package join is what a new member's Pod runs before etcd: it waits until
// etcd lists the member, asking the peers over their peer port.
//
// A joining member's Pod is started before the member is added to etcd, so
// that its DNS name exists by the time the leader first looks it up: cluster
// DNS caches a name that does not exist yet (for seconds), and a leader that
// looked too early cannot reach its new learner until the negative answer
// expires. etcd itself must not start before the add (it would not find
// itself in the membership and exit), so this gate runs first, as an init
// container of the operator's image.
package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Environment of the gate, set by the Pod builder.
const (
	// EnvPeerURL is the member's own peer URL.
	EnvPeerURL = "ETCD_JOIN_PEER_URL"
	// EnvPeers are the peer URLs of the members it joins, comma-separated.
	EnvPeers = "ETCD_JOIN_PEERS"
	// EnvTLSDir, when set, holds tls.crt, tls.key and ca.crt for the peer
	// plane.
	EnvTLSDir = "ETCD_JOIN_PEER_TLS_DIR"
	// EnvSelfSigned, when "true", talks TLS to peers with etcd's
	// self-signed --peer-auto-tls certificates, which nothing can verify;
	// the gate only reads the public membership.
	EnvSelfSigned = "ETCD_JOIN_PEER_AUTO_TLS"
)

// Interval is how often the peers are asked.
const Interval = 250 * time.Millisecond

// Config is what the gate needs.
type Config struct {
	PeerURL string
	Peers   []string
	TLS     *tls.Config
}

// FromEnv reads the configuration from the environment.
func FromEnv() (Config, error) {
	cfg := Config{PeerURL: os.Getenv(EnvPeerURL)}
	for _, p := range strings.Split(os.Getenv(EnvPeers), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	if cfg.PeerURL == "" || len(cfg.Peers) == 0 {
		return cfg, fmt.Errorf("%s and %s must be set", EnvPeerURL, EnvPeers)
	}
	if dir := os.Getenv(EnvTLSDir); dir != "" {
		t, err := peerTLS(dir)
		if err != nil {
			return cfg, err
		}
		cfg.TLS = t
	}
	if os.Getenv(EnvSelfSigned) == "true" {
		cfg.TLS = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // etcd's own self-signed peer certificates; only the membership is read
	}
	return cfg, nil
}

func peerTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("loading the peer certificate: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("loading the peer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the peer CA holds no certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Wait returns once a peer lists the member, or when ctx ends. It reports
// what it waits for on progress, once per change.
func Wait(ctx context.Context, cfg Config, progress func(string)) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.TLS}}
	defer hc.CloseIdleConnections()
	last := ""
	for {
		listed, why := listedByAny(ctx, hc, cfg)
		if listed {
			return nil
		}
		if why != last {
			progress(why)
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", last, ctx.Err())
		case <-time.After(Interval):
		}
	}
}

// member is the part of etcd's peer /members document the gate reads.
type member struct {
	PeerURLs []string `json:"peerURLs"`
}

func listedByAny(ctx context.Context, hc *http.Client, cfg Config) (bool, string) {
	why := "no peer answered"
	for _, peer := range cfg.Peers {
		members, err := fetch(ctx, hc, peer)
		if err != nil {
			why = err.Error()
			continue
		}
		if slices.ContainsFunc(members, func(m member) bool { return slices.Contains(m.PeerURLs, cfg.PeerURL) }) {
			return true, ""
		}
		why = fmt.Sprintf("%s is not a member yet (asked %s)", cfg.PeerURL, peer)
	}
	return false, why
}

func fetch(ctx context.Context, hc *http.Client, peer string) ([]member, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(peer, "/")+"/members", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/members: %s", peer, resp.Status)
	}
	var out []member
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s/members: %w", peer, err)
	}
	return out, nil
}
