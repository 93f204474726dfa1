package images

import (
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const prometheusRepository = "quay.io/prometheus/prometheus"

// Prometheus is the reference of the image of the toolchain's Prometheus
// (its version is the name of the directory bin/prometheus links into).
func Prometheus(toolsRoot string) (string, error) {
	return toolRef(toolsRoot, "prometheus", "Prometheus", prometheusRepository)
}

// PrometheusImage builds (once) the image `sandbox up --with prometheus`
// loads: like the upstream image, the server at /bin/prometheus, running as
// nobody, /prometheus for its data. Not a builtin: a sandbox without
// Prometheus never needs it.
func PrometheusImage(toolsRoot string) (Tarball, error) {
	ref, err := Prometheus(toolsRoot)
	if err != nil {
		return Tarball{}, err
	}
	return cached(toolsRoot, "prometheus-"+strings.TrimPrefix(ref, prometheusRepository+":"), Spec{
		Refs:  []string{ref},
		Files: map[string]string{"bin/prometheus": filepath.Join(toolsRoot, "bin", "prometheus")},
		Text:  accounts,
		Dirs: map[string]os.FileMode{
			"bin": 0o755, "etc": 0o755, "tmp": 0o777 | os.ModeSticky, "prometheus": 0o777,
		},
		Config: v1.Config{Entrypoint: []string{"/bin/prometheus"}, User: "65534:65534", WorkingDir: "/prometheus"},
	})
}
