package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/seed74754924/etcd-operator/internal/dataguard"
	"github.com/seed74754924/etcd-operator/internal/join"
)

// subcommands run in Pods the operator makes, instead of the manager.
var subcommands = map[string]func(ctx context.Context, args []string) error{
	"await-join": awaitJoin,
	"guard-data": guardData,
}

// guardData checks the member's data directory, then becomes etcd: the
// arguments after "--" are etcd's command line.
func guardData(_ context.Context, args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New("guard-data: no command to run after --")
	}
	if err := dataguard.Check(os.Getenv(dataguard.EnvMemberID), os.Getenv(dataguard.EnvDataDir)); err != nil {
		return err
	}
	path, err := exec.LookPath(args[0])
	if err != nil && !strings.Contains(args[0], "/") {
		// etcd's images keep it in /usr/local/bin, whatever PATH says.
		path, err = exec.LookPath("/usr/local/bin/" + args[0])
	}
	if err != nil {
		return fmt.Errorf("guard-data: %w", err)
	}
	return syscall.Exec(path, args, os.Environ())
}

// awaitJoin holds a new member's Pod until etcd lists the member.
func awaitJoin(ctx context.Context, _ []string) error {
	cfg, err := join.FromEnv()
	if err != nil {
		return err
	}
	return join.Wait(ctx, cfg, func(msg string) { fmt.Fprintln(os.Stderr, "waiting to be added to etcd:", msg) })
}
