package images

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// certManagerRepository names the image of hack/cert-manager: cert-manager's
// real controllers wired by this project, so deliberately not upstream's
// quay.io/jetstack/cert-manager-controller, whose binary differs.
const certManagerRepository = "ghcr.io/seed74754924/etcd-operator/cert-manager-controller"

// CertManagerDir is the toolchain directory of cert-manager-controller and
// the CRDs of the same release (crds/).
func CertManagerDir(toolsRoot string) (string, error) {
	target, err := filepath.EvalSymlinks(filepath.Join(toolsRoot, "bin", "cert-manager-controller"))
	if err != nil {
		return "", fmt.Errorf("cert-manager-controller is not in the toolchain: %w (run `make tools`)", err)
	}
	return filepath.Dir(target), nil
}

// CertManager is the reference of the cert-manager-controller image. Its tag
// is the toolchain directory's name (release and source hash), so a changed
// wiring is a new image that no node has cached.
func CertManager(toolsRoot string) (string, error) {
	dir, err := CertManagerDir(toolsRoot)
	if err != nil {
		return "", err
	}
	return certManagerRepository + ":" + filepath.Base(dir), nil
}

// CertManagerImage builds (once) the image `sandbox up --with cert-manager`
// loads: distroless-like, the binary at /cert-manager-controller, running as
// nonroot. It is not a builtin, so a sandbox without cert-manager never needs
// it.
func CertManagerImage(toolsRoot string) (Tarball, error) {
	ref, err := CertManager(toolsRoot)
	if err != nil {
		return Tarball{}, err
	}
	dir, err := CertManagerDir(toolsRoot)
	if err != nil {
		return Tarball{}, err
	}
	return cached(toolsRoot, "cert-manager-"+filepath.Base(dir), Spec{
		Refs:  []string{ref},
		Files: map[string]string{"cert-manager-controller": filepath.Join(dir, "cert-manager-controller")},
		Text:  accounts,
		Dirs:  map[string]os.FileMode{"etc": 0o755, "tmp": 0o777 | os.ModeSticky},
		Config: v1.Config{
			Entrypoint: []string{"/cert-manager-controller"},
			User:       "65532:65532",
		},
	})
}
