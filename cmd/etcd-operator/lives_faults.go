//go:build faultinjection

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/metrics"
	"github.com/seed74754924/etcd-operator/test/infra/faults"
)

// runLives runs the manager as a series of lives: with
// ETCD_OPERATOR_FAULT_RESTARTS=N each of the first N ends right after its
// first mutation and a fresh one starts with nothing but what the API server
// and etcd hold (see package faults).
func runLives(ctx context.Context, opts options, scheme *runtime.Scheme, m *metrics.Metrics) error {
	restarts, err := faultRestarts()
	if err != nil {
		return err
	}
	for life := 1; ; life++ {
		lifeCtx, end := context.WithCancel(ctx)
		hooks := faultHooks{}
		if life <= restarts {
			hooks.life = faults.NewLife(1, end)
		}
		err := runLife(lifeCtx, opts, scheme, m, hooks)
		end()
		if !hooks.life.Ended() || ctx.Err() != nil {
			return err
		}
		ctrl.Log.Info("Fault injection ended this life after its first mutation; starting afresh", "life", life, "of", restarts)
	}
}

// faultHooks counts a life's mutations; a nil life injects nothing.
type faultHooks struct{ life *faults.Life }

func (h faultHooks) Client(c client.WithWatch) client.WithWatch { return h.life.Client(c) }
func (h faultHooks) Dialer(d etcd.Dialer) etcd.Dialer           { return h.life.Dialer(d) }
func (h faultHooks) Injecting() bool                            { return true }

// faultRestarts reads the number of lives to end by injection.
func faultRestarts() (int, error) {
	v := os.Getenv(faults.EnvRestarts)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a number of restarts", faults.EnvRestarts, v)
	}
	return n, nil
}
