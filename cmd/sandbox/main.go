// Command sandbox runs a local Kubernetes without containers: a real
// control plane, process nodes that run Pods as namespaced processes, DNS
// through hosts files, directory-backed storage and fault injection.
package main

import (
	"fmt"
	"os"

	"github.com/seed74754924/etcd-operator/internal/sandbox/container"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "container-init" {
		err := container.RunInit(os.Args[2])
		fmt.Fprintln(os.Stderr, "container-init:", err)
		os.Exit(container.StartErrorCode)
	}
	if len(os.Args) > 2 && os.Args[1] == "exec-init" {
		err := container.RunExec(os.Args[2])
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(126)
	}
}
