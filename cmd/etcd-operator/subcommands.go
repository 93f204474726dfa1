package main

import (
	"context"
	"fmt"
	"os"

	"github.com/seed74754924/etcd-operator/internal/join"
)

// subcommands run in Pods the operator makes, instead of the manager.
var subcommands = map[string]func(ctx context.Context, args []string) error{
	"await-join": awaitJoin,
}

// awaitJoin holds a new member's Pod until etcd lists the member.
func awaitJoin(ctx context.Context, _ []string) error {
	cfg, err := join.FromEnv()
	if err != nil {
		return err
	}
	return join.Wait(ctx, cfg, func(msg string) { fmt.Fprintln(os.Stderr, "waiting to be added to etcd:", msg) })
}
