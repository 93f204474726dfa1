package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/prometheus"
)

// knownAddons are what `up --with` installs, in this order.
var knownAddons = []string{"cert-manager", "prometheus"}

// sandboxRelease is the operator's release `make sandbox` installs
// (hack/sandbox-install.sh), which the Prometheus add-on scrapes.
var sandboxRelease = prometheus.Release{Name: "etcd-operator", Namespace: "etcd-operator-system"}

// addonInstallers install one add-on each and say what is ready.
var addonInstallers = map[string]func(context.Context, *sandbox.Sandbox) (string, error){
	"cert-manager": func(ctx context.Context, s *sandbox.Sandbox) (string, error) {
		return "cert-manager is ready (CA and SelfSigned issuers; no webhook)", s.InstallCertManager(ctx, 3*time.Minute)
	},
	"prometheus": func(ctx context.Context, s *sandbox.Sandbox) (string, error) {
		url, err := s.InstallPrometheus(ctx, sandboxRelease, 3*time.Minute)
		return fmt.Sprintf("Prometheus is ready at %s (from this host): it scrapes the operator's release %s in %s and its etcd members "+
			"as the chart's monitors say, and evaluates the chart's alerts (%s/alerts)", url, sandboxRelease.Name, sandboxRelease.Namespace, url), err
	},
}

// addons is the --with flag: add-ons to install once the nodes are Ready.
type addons []string

func (a *addons) String() string { return strings.Join(*a, ",") }

func (a *addons) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if !slices.Contains(knownAddons, name) {
			return fmt.Errorf("unknown add-on %q (known: %s)", name, strings.Join(knownAddons, ", "))
		}
		if !slices.Contains(*a, name) {
			*a = append(*a, name)
		}
	}
	return nil
}

// install installs each requested add-on into s; installing again into a
// running sandbox leaves what exists in place.
func (a addons) install(ctx context.Context, s *sandbox.Sandbox) error {
	for _, name := range knownAddons {
		if !slices.Contains(a, name) {
			continue
		}
		done, err := addonInstallers[name](ctx, s)
		if err != nil {
			return err
		}
		fmt.Println(done)
	}
	return nil
}
