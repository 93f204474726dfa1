package main

import (
	"os"
	"runtime"
)

// init pins the main goroutine to the main thread for the two subcommands
// that join namespaces: setns applies to one thread, and the exec at the end
// must happen on that same thread.
func init() {
	if len(os.Args) > 1 && (os.Args[1] == "container-init" || os.Args[1] == "exec-init") {
		runtime.LockOSThread()
	}
}
