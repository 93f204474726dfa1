package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/internal/sandbox"
)

// knownAddons are what `up --with` installs, in this order.
var knownAddons = []string{"cert-manager"}

// addonInstallers install one add-on each and say what is ready.
var addonInstallers = map[string]func(context.Context, *sandbox.Sandbox) (string, error){
	"cert-manager": func(ctx context.Context, s *sandbox.Sandbox) (string, error) {
		return "cert-manager is ready (CA and SelfSigned issuers; no webhook)", s.InstallCertManager(ctx, 3*time.Minute)
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
