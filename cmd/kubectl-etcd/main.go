// Command kubectl-etcd is the kubectl plugin for day-two work on etcd
// clusters run by etcd-operator: `kubectl etcd --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/kubectletcd"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectletcd.Main(ctx, version, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
