// Command cert-manager-controller runs cert-manager's own controllers, from
// the github.com/cert-manager/cert-manager module's pkg/controller, for the
// sandbox. Upstream's cmd/controller is a separate module the proxy does not
// serve, so this small main wires the same controller registry and context
// factory with only what the operator's tests need: Certificates, the
// CertificateRequest approver and its CA and SelfSigned signers, and Issuer
// and ClusterIssuer readiness. No ACME, Vault, Venafi, ingress-shim or
// CertificateSigningRequest controllers run.
//
// It lives in its own Go module so that cert-manager's dependency graph never
// touches the operator's go.mod.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	clusterissuers "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	issuers "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The issuer types the Issuer and ClusterIssuer controllers can set up;
	// each registers itself with pkg/issuer when imported.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// wiredControllers are the names, in cert-manager's registry, of every
// controller this binary starts. Importing a package registers its
// controller; only these names are started.
var wiredControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	crapprover.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	opts := parseFlags(os.Args[1:])
	logf.InitLogs()
	err := runUntilSignalled(opts)
	logf.FlushLogs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

// runUntilSignalled runs the controllers until SIGINT or SIGTERM.
func runUntilSignalled(opts options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(logf.NewContext(ctx, logf.Log), opts)
}

// run starts the health server, waits for leadership when asked to, then
// starts the wired controllers and their informers, and returns when ctx ends
// or any of them fails.
func run(ctx context.Context, o options) error {
	log := logf.FromContext(ctx)
	factory, err := controllerpkg.NewContextFactory(ctx, o.contextOptions())
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	shared, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	g, ctx := errgroup.WithContext(ctx)
	health := newHealthServer(o.healthAddress)
	g.Go(func() error { return health.serve(ctx) })

	if o.leaderElect {
		leading, err := startLeaderElection(ctx, g, factory, o)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return g.Wait()
		case <-leading:
		}
	}

	known := controllerpkg.Known()
	for _, name := range wiredControllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered by cert-manager", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		log.Info("Starting controller", "controller", name)
		g.Go(func() error { return c.Run(o.workers, ctx) })
	}

	// The informers start after every controller has asked for the ones it
	// needs, as upstream's controller does.
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	g.Go(func() error {
		if !cachesSynced(ctx, shared) {
			return nil
		}
		log.Info("Informer caches synced; reporting ready")
		health.setReady()
		return nil
	})

	err = g.Wait()
	shared.KubeSharedInformerFactory.Shutdown()
	shared.SharedInformerFactory.Shutdown()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// cachesSynced waits for every informer the controllers asked for and
// reports whether all of them synced before ctx ended.
func cachesSynced(ctx context.Context, c *controllerpkg.Context) bool {
	for _, m := range []func(<-chan struct{}) map[string]bool{
		func(stop <-chan struct{}) map[string]bool {
			return toNames(c.SharedInformerFactory.WaitForCacheSync(stop))
		},
		c.KubeSharedInformerFactory.WaitForCacheSync,
	} {
		for _, ok := range m(ctx.Done()) {
			if !ok {
				return false
			}
		}
	}
	return ctx.Err() == nil
}

// toNames turns client-go's per-type sync map into one keyed by name so both
// informer factories can be checked alike.
func toNames[K comparable](in map[K]bool) map[string]bool {
	out := make(map[string]bool, len(in))
	for k, v := range in {
		out[fmt.Sprint(k)] = v
	}
	return out
}

// leaseTimings are client-go's usual leader-election timings, which
// upstream's defaults also use.
var leaseTimings = struct{ lease, renew, retry time.Duration }{60 * time.Second, 40 * time.Second, 15 * time.Second}
