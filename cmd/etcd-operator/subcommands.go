package main

import (
	"context"

	"github.com/seed74754924/etcd-operator/internal/join"
)

// subcommands run in Pods the operator makes, instead of the manager.
var subcommands = map[string]func(ctx context.Context, args []string) error{
	"await-join": join.Main,
}
