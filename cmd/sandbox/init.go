package main

import (
	"os"
	"runtime"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/namespace"
)

// init pins the main goroutine to the main thread when the daemon still has
// to join the sandbox's network namespace: setns applies to one thread, and
// the exec that follows must happen on that same thread.
func init() {
	if enteringNetns() {
		runtime.LockOSThread()
	}
}

func enteringNetns() bool {
	return len(os.Args) > 1 && os.Args[1] == "daemon" && os.Getenv(namespace.EnteredEnv) == ""
}
