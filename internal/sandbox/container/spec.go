// Package container is the tiny init that turns a re-exec of the sandbox
// binary into a container: `sandbox container-init SPEC` enters the Pod's
// network namespace, builds the root filesystem (an overlay over the image
// with the volumes bind-mounted), pivots into it, drops privileges and execs
// the entrypoint; `sandbox exec-init SPEC` joins a running container for
// `kubectl exec` and exec probes.
package container

import (
	"encoding/json"
	"os"
	"strings"
)

// Mount is one bind mount into the container.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// File marks a single-file bind (the target is created as a file).
	File bool `json:"file,omitempty"`
}

// Spec is everything container-init needs; the node writes it as JSON.
type Spec struct {
	NetnsPath      string   `json:"netnsPath"`
	Hostname       string   `json:"hostname"`
	Rootfs         string   `json:"rootfs"`
	Scratch        string   `json:"scratch"` // empty host dir; holds the overlay's tmpfs
	ReadOnlyRootfs bool     `json:"readOnlyRootfs,omitempty"`
	Mounts         []Mount  `json:"mounts,omitempty"`
	Args           []string `json:"args"`
	Env            []string `json:"env,omitempty"`
	WorkingDir     string   `json:"workingDir,omitempty"`
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	Groups         []uint32 `json:"groups,omitempty"`
	// ErrorFile receives the reason a start failed before the exec.
	ErrorFile string `json:"errorFile,omitempty"`
}

// ExecSpec runs a command in a running container.
type ExecSpec struct {
	PID        int      `json:"pid"`
	Args       []string `json:"args"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Groups     []uint32 `json:"groups,omitempty"`
}

// StartErrorCode is container-init's exit code when it fails before the
// exec; the node reports such an exit as StartError.
const StartErrorCode = 128

// WriteSpec saves a spec for container-init.
func WriteSpec(path string, spec *Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// envValue returns the value of key in a KEY=VALUE list.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
