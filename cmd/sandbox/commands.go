package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/daemon"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

func fault(ctx context.Context, args []string) error {
	fs, dir := flags("fault")
	var ports portList
	fs.Var(&ports, "ports", "partition only: cut the Pod's TCP traffic on these ports (comma-separated), both ways, and nothing else")
	if err := parse(fs, args, -2); err != nil {
		return err
	}
	kind, target := fs.Arg(0), fs.Arg(1)
	if len(ports) > 0 && kind != "partition" {
		return usageError{fmt.Sprintf("--ports is for partition, not %s", kind)}
	}
	s, err := sandbox.Open(*dir)
	if err != nil {
		return err
	}
	ns, name, namespaced := strings.Cut(target, "/")
	needsNS := kind != "stop-node" && kind != "start-node"
	if needsNS && !namespaced {
		return usageError{fmt.Sprintf("%s needs NAMESPACE/NAME, got %q", kind, target)}
	}
	switch kind {
	case "kill":
		return s.Kill(ctx, ns, name, fs.Arg(2))
	case "stop-node":
		return s.StopNode(ctx, target)
	case "start-node":
		return s.StartNode(ctx, target)
	case "partition":
		if len(ports) > 0 {
			return s.PartitionPorts(ctx, ns, name, ports...)
		}
		return s.Partition(ctx, ns, name)
	case "heal":
		return s.Heal(ctx, ns, name)
	case "wipe":
		return s.Wipe(ctx, ns, name)
	}
	return usageError{fmt.Sprintf("unknown fault %q (kill, stop-node, start-node, partition, heal, wipe)", kind)}
}

// portList is the --ports flag: TCP ports, comma-separated or repeated.
type portList []int

func (p *portList) String() string {
	s := make([]string, len(*p))
	for i, port := range *p {
		s[i] = strconv.Itoa(port)
	}
	return strings.Join(s, ",")
}

func (p *portList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		port, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("%q is not a TCP port (1-65535)", f)
		}
		if !slices.Contains(*p, port) {
			*p = append(*p, port)
		}
	}
	return nil
}

func image(ctx context.Context, args []string) error {
	fs, dir := flags("image")
	if err := parse(fs, args, -1); err != nil {
		return err
	}
	s, err := sandbox.Open(*dir)
	if err != nil {
		return err
	}
	switch sub := fs.Arg(0); {
	case sub == "add" && fs.NArg() == 3:
		return s.AddImage(ctx, fs.Arg(1), fs.Arg(2))
	case sub == "load" && fs.NArg() == 2:
		refs, err := s.LoadImage(ctx, fs.Arg(1))
		if err != nil {
			return err
		}
		for _, r := range refs {
			fmt.Println("loaded", r)
		}
		return nil
	case sub == "list" && fs.NArg() == 1:
		st, err := s.Status(ctx)
		if err != nil {
			return err
		}
		for _, r := range st.Images {
			fmt.Println(r)
		}
		return nil
	}
	return usageError{"image add REF DIR | image load FILE | image list"}
}

// daemonCmd is the detached process `up` starts; by now it runs in the
// sandbox's network namespace and its own mount namespace.
func daemonCmd(args []string) error {
	fs := flag.NewFlagSet("sandbox daemon", flag.ContinueOnError)
	dir := fs.String("dir", "", "sandbox directory")
	maxBackoff := fs.Duration("max-backoff", 0, "back-off cap")
	if err := fs.Parse(args); err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	in, err := instance.Load(*dir)
	if err != nil {
		return err
	}
	bin, err := tools.BinDir()
	if err != nil {
		return err
	}
	return daemon.Run(daemon.Options{Instance: in, ToolsBin: bin, MaxBackoff: *maxBackoff})
}
