package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
)

// InstallTools copies the running binary into dir, so that a later init
// container running another image (etcd's, for its etcdutl) can run the
// agent. The binary is static and needs nothing else from its image.
func InstallTools(dir string) error {
	if dir == "" {
		return fmt.Errorf("%s is not set", agentenv.EnvToolsDir)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(dir, "."+agentenv.ToolName+"-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, agentenv.ToolName))
}
