package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// MinIO is the reference of the S3 server image built from the toolchain's
// MinIO (its version is the name of the directory bin/minio links into).
// Snapshot tests and `make sandbox` run it as a Pod.
func MinIO(toolsRoot string) (string, error) {
	return toolRef(toolsRoot, "minio", "MinIO", minioRepository)
}

// toolRef is the image reference of a toolchain binary: repository, tagged
// with the name of the directory bin/<binary> links into (its version).
func toolRef(toolsRoot, binary, name, repository string) (string, error) {
	target, err := filepath.EvalSymlinks(filepath.Join(toolsRoot, "bin", binary))
	if err != nil {
		return "", fmt.Errorf("%s is not in the toolchain: %w (run `make tools`)", name, err)
	}
	return repository + ":" + filepath.Base(filepath.Dir(target)), nil
}

const minioRepository = "quay.io/minio/minio"

// minioImage is like the upstream image: the server in /usr/bin, users root
// and nonroot, /data for its volume, `minio server /data` by default.
func minioImage(toolsRoot string) (Tarball, error) {
	ref, err := MinIO(toolsRoot)
	if err != nil {
		return Tarball{}, err
	}
	return cached(toolsRoot, "minio-"+strings.TrimPrefix(ref, minioRepository+":"), Spec{
		Refs:  []string{ref},
		Files: map[string]string{"usr/bin/minio": filepath.Join(toolsRoot, "bin", "minio")},
		Text:  accounts,
		Dirs: map[string]os.FileMode{
			"etc": 0o755, "usr": 0o755, "usr/bin": 0o755, "tmp": 0o777 | os.ModeSticky,
			"data": 0o777, "home": 0o755, "home/nonroot": 0o700, "root": 0o700,
		},
		Owners: map[string][2]int{"home/nonroot": {65532, 65532}},
		Config: v1.Config{Entrypoint: []string{"/usr/bin/minio"}, Cmd: []string{"server", "/data"}, Env: []string{"HOME=/tmp"}},
	})
}

// Kubectl is the reference of the toolchain's kubectl as an image, as
// upstream publishes it (the binary at /bin/kubectl): what a CronJob that
// creates EtcdSnapshots runs in the sandbox.
func Kubectl(toolsRoot string) (string, error) {
	return toolRef(toolsRoot, "kubectl", "kubectl", "registry.k8s.io/kubectl")
}

func kubectlImage(toolsRoot string) (Tarball, error) {
	ref, err := Kubectl(toolsRoot)
	if err != nil {
		return Tarball{}, err
	}
	return cached(toolsRoot, "kubectl-"+ref[strings.LastIndex(ref, ":")+1:], Spec{
		Refs:   []string{ref},
		Files:  map[string]string{"bin/kubectl": filepath.Join(toolsRoot, "bin", "kubectl")},
		Text:   accounts,
		Dirs:   map[string]os.FileMode{"bin": 0o755, "etc": 0o755, "tmp": 0o777 | os.ModeSticky},
		Config: v1.Config{Entrypoint: []string{"/bin/kubectl"}, User: "65532:65532", Env: []string{"HOME=/tmp"}},
	})
}
