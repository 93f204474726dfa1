package join

import (
	"context"
	"fmt"
	"os"
)

// Main holds a new member's Pod until etcd lists the member.
func Main(ctx context.Context, _ []string) error {
	cfg, err := FromEnv()
	if err != nil {
		return err
	}
	return Wait(ctx, cfg, func(msg string) { fmt.Fprintln(os.Stderr, "waiting to be added to etcd:", msg) })
}
