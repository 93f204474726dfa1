//go:build !faultinjection

package main

import (
	"context"
	"errors"
	"os"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// runLives runs the manager once. This build carries no fault injection;
// asking for it is an error rather than a silently ignored setting.
func runLives(ctx context.Context, opts options, scheme *runtime.Scheme, m *metrics.Metrics) error {
	if os.Getenv("ETCD_OPERATOR_FAULT_RESTARTS") != "" {
		return errors.New("ETCD_OPERATOR_FAULT_RESTARTS is set, but this build of the operator has no fault injection (it is built only with -tags faultinjection, for tests)")
	}
	return runLife(ctx, opts, scheme, m, noHooks{})
}
