// Command etcd-tools is what the operator runs inside a member's Pod: the
// data guard that wraps etcd (guard-data) and the join gate that holds a
// joining member until etcd lists it (await-join). It is the operator's own
// code for both, in a binary of the standard library's size: it starts in
// milliseconds and stays resident beside etcd for the Pod's life at a few
// MiB, where the operator binary (which can run both too, for Pods made
// before this binary existed) takes a tenth of a second to start and tens of
// MiB to run. It ships in the operator's image as /etcd-tools.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/dataguard"
	"github.com/seed74754924/etcd-operator/internal/join"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-tools guard-data -- ETCD_COMMAND... | await-join")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "guard-data":
		os.Exit(dataguard.Main(os.Args[2:]))
	case "await-join":
		os.Exit(awaitJoin(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "etcd-tools: unknown command %q (want guard-data or await-join)\n", os.Args[1])
		os.Exit(2)
	}
}

// awaitJoin runs the join gate until etcd lists the member, or a signal.
func awaitJoin(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := join.Main(ctx, args); err != nil {
		fmt.Fprintln(os.Stderr, "await-join:", err)
		return 1
	}
	return 0
}
