package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/certmanager"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// InstallCertManager loads the toolchain's cert-manager-controller image
// into every node, installs the CRDs of the same release and the controller
// (package certmanager), and returns once the CRDs are Established and the
// controller's informers have synced, or after timeout.
func (s *Sandbox) InstallCertManager(ctx context.Context, timeout time.Duration) error {
	bin, err := tools.BinDir()
	if err != nil {
		return err
	}
	root := filepath.Dir(bin)
	image, err := images.CertManagerImage(root)
	if err != nil {
		return err
	}
	if _, err := s.LoadImage(ctx, image.File); err != nil {
		return fmt.Errorf("loading the cert-manager image: %w", err)
	}
	dir, err := images.CertManagerDir(root)
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "crds")
	cfg, err := s.RESTConfig()
	if err != nil {
		return err
	}
	if err := certmanager.Install(ctx, cfg, crds, image.Refs[0]); err != nil {
		return fmt.Errorf("installing cert-manager: %w", err)
	}
	_, err = waitAddon(ctx, "cert-manager", timeout, func(ctx context.Context) (bool, string, error) {
		return certmanager.Ready(ctx, cfg, crds)
	})
	return err
}

// waitAddon polls ready until it holds or timeout passes, and then says
// what was still missing. ready's text is what is missing while it does not
// hold, and what it returns once it does.
func waitAddon(ctx context.Context, what string, timeout time.Duration, ready func(context.Context) (bool, string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, why, err := ready(ctx)
		if ok {
			return why, nil
		}
		if err != nil {
			why = err.Error()
		}
		last = why
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s not ready within %s: %s", what, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
