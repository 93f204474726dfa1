package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// dialTimeout bounds each call that opens the snapshot: an unreachable
// cluster fails the attempt, and the Job retries it.
const dialTimeout = 10 * time.Second

// snapshotOpenTimeout bounds opening a snapshot stream (until etcd sends its
// first message), not the stream; a variable for the test that shows it.
var snapshotOpenTimeout = dialTimeout

// tlsConfig builds the client TLS of the agent from mounted files; nil when
// the cluster's client plane is plain.
func tlsConfig(a EtcdAccess) (*tls.Config, error) {
	if a.CAFile == "" {
		return nil, nil
	}
	ca, err := os.ReadFile(a.CAFile)
	if err != nil {
		return nil, permanent(conditions.ReasonAgentMisconfigured, "reading the etcd CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, permanent(conditions.ReasonAgentMisconfigured, "%s holds no PEM certificate to verify etcd with", a.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if a.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
		if err != nil {
			return nil, permanent(conditions.ReasonAgentMisconfigured, "loading the client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// dialEtcd connects to the cluster, with credentials when given: clientv3
// authenticates while it connects, so bad credentials fail here.
func dialEtcd(ctx context.Context, a EtcdAccess) (*clientv3.Client, error) {
	tc, err := tlsConfig(a)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: a.Endpoints, TLS: tc, Username: a.Username, Password: a.Password,
		DialTimeout: dialTimeout, Context: ctx, Logger: zap.NewNop(),
		// A snapshot message is at most a few MiB; leave room.
		MaxCallRecvMsgSize: 64 << 20,
	})
	if err != nil {
		return nil, etcdError(err, a)
	}
	// Connections are made lazily: make one now, so that an unreachable
	// cluster or refused credentials show as such.
	if _, err := c.AuthStatus(dctx); err != nil {
		_ = c.Close()
		return nil, etcdError(err, a)
	}
	return c, nil
}

// memberStatus asks the member the client is connected to about itself, on
// the same connection the snapshot then streams from (a Service may put
// another member behind a new connection).
func memberStatus(ctx context.Context, c *clientv3.Client, a EtcdAccess) (*etcdserverpb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	st, err := etcdserverpb.NewMaintenanceClient(c.ActiveConnection()).Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		return nil, etcdError(err, a)
	}
	return st, nil
}

// etcdError gives an etcd error the reason it is reported under.
func etcdError(err error, a EtcdAccess) *Error {
	if authError(rpctypes.Error(err)) {
		if a.Username == "" {
			return permanent(conditions.ReasonAuthRequiredNotConfigured,
				"etcd has authentication enabled and no credentials were given: set spec.auth on the EtcdCluster (%v)", err)
		}
		return permanent(conditions.ReasonAuthCredentialsRejected,
			"etcd rejected the credentials of user %s: check the password in the root credentials Secret (%v)", a.Username, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return transient(conditions.ReasonClusterUnreachable, "etcd at %v did not answer within %s", a.Endpoints, dialTimeout)
	}
	return transient(conditions.ReasonClusterUnreachable, "reaching etcd at %v: %v", a.Endpoints, err)
}

// authError reports whether etcd refused a request for want of (valid)
// credentials.
func authError(err error) bool {
	for _, e := range []error{rpctypes.ErrUserEmpty, rpctypes.ErrPermissionDenied, rpctypes.ErrInvalidAuthToken,
		rpctypes.ErrAuthFailed, rpctypes.ErrUserNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
