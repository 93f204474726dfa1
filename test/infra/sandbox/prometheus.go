package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/prometheus"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// InstallPrometheus loads the toolchain's Prometheus image into every node,
// installs Prometheus configured from the chart's monitors for the
// operator's release (package prometheus), and returns the URL of its
// Service once it serves, or fails after timeout. The release need not be
// installed yet: Prometheus finds its targets when they appear.
func (s *Sandbox) InstallPrometheus(ctx context.Context, r prometheus.Release, timeout time.Duration) (string, error) {
	bin, err := tools.BinDir()
	if err != nil {
		return "", err
	}
	image, err := images.PrometheusImage(filepath.Dir(bin))
	if err != nil {
		return "", err
	}
	if _, err := s.LoadImage(ctx, image.File); err != nil {
		return "", fmt.Errorf("loading the Prometheus image: %w", err)
	}
	rendered, err := tools.RenderChart(r.Name, r.Namespace, prometheus.MonitoringValues(r))
	if err != nil {
		return "", err
	}
	objects, err := prometheus.Objects(rendered, image.Refs[0])
	if err != nil {
		return "", err
	}
	cfg, err := s.RESTConfig()
	if err != nil {
		return "", err
	}
	if err := prometheus.Install(ctx, cfg, objects); err != nil {
		return "", fmt.Errorf("installing Prometheus: %w", err)
	}
	return waitAddon(ctx, "Prometheus", timeout, func(ctx context.Context) (bool, string, error) {
		return prometheus.Ready(ctx, cfg)
	})
}
