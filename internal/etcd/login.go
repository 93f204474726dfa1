package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// ErrLearnerRefused: the request needs raft and went to a learner, which
// serves only reads of its own state. Logging in is such a request.
var ErrLearnerRefused = errors.New("etcd: request not supported by a learner")

// loginAttempt bounds one member's answer to a login, so a member that is
// down does not use up the whole dial.
const loginAttempt = 3 * time.Second

// Authenticator logs in through one endpoint and returns the token etcd
// issued ("" when etcd has authentication off).
type Authenticator func(ctx context.Context, endpoint string) (string, error)

// Login obtains a token for cfg's user. Logging in is a raft request: a
// learner refuses it, and a learner is what the operator dials most often on
// its own (to ask a joining member about itself). So the members are tried
// one at a time, cfg.LoginVia first (the voters), then cfg.Endpoints, until
// one logs the user in. Wrong credentials end the search at once; any other
// refusal moves on to the next member. The token works on every member,
// learners included, once they applied the login (etcd replicates it).
func Login(ctx context.Context, cfg Config, auth Authenticator) (string, error) {
	var tried []string
	var last error
	for _, ep := range slices.Concat(cfg.LoginVia, cfg.Endpoints) {
		if slices.Contains(tried, ep) {
			continue
		}
		tried = append(tried, ep)
		actx, cancel := context.WithTimeout(ctx, loginAttempt)
		token, err := auth(actx, ep)
		cancel()
		if err == nil {
			return token, nil
		}
		err = classify(err)
		if errors.Is(err, ErrAuthFailed) {
			return "", fmt.Errorf("logging in as %s through %s: %w", cfg.Username, ep, err)
		}
		last = fmt.Errorf("logging in as %s through %s: %w", cfg.Username, ep, err)
		if ctx.Err() != nil {
			break
		}
	}
	if last == nil {
		last = errors.New("no member to log in through")
	}
	return "", last
}

// authenticate logs in through one endpoint with a client of its own that
// carries no credentials.
func authenticate(cfg Config, opts []grpc.DialOption) Authenticator {
	return func(ctx context.Context, endpoint string) (string, error) {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{endpoint},
			TLS:         cfg.TLS,
			DialTimeout: loginAttempt,
			Context:     ctx,
			Logger:      zap.NewNop(),
			DialOptions: opts,
		})
		if err != nil {
			return "", err
		}
		defer func() { _ = c.Close() }()
		resp, err := c.Authenticate(ctx, cfg.Username, cfg.Password)
		switch {
		case errors.Is(err, rpctypes.ErrAuthNotEnabled):
			return "", nil
		case err != nil:
			return "", err
		}
		return resp.Token, nil
	}
}
