// Command sandbox runs a local Kubernetes without a container engine: a
// real control plane, real nodes (a kubelet and containerd each, Pods on CNI
// bridges), kube-proxy, CoreDNS, directory-backed storage and fault
// injection, all in a network namespace, a mount namespace and a cgroup of
// its own.
//
//	sandbox up [--dir D] [--nodes N] [--name ID] [--pod-cidr CIDR] [--max-backoff 5m] [--with cert-manager,prometheus]
//	sandbox down [--dir D] [--name ID]
//	sandbox status [--dir D]
//	sandbox fault kill NS/POD [CONTAINER] | stop-node NODE | start-node NODE |
//	              partition NS/POD [--ports P[,P...]] | heal NS/POD | wipe NS/PVC   [--dir D]
//	sandbox image add REF DIR | load FILE | list                     [--dir D]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/namespace"
)

const usage = `usage: sandbox COMMAND [flags]

  up        start a sandbox (returns when every node is Ready)
  down      stop it and remove everything it made (also after a crash)
  status    show the running sandbox
  fault     kill NS/POD [CONTAINER] | stop-node NODE | start-node NODE |
            partition NS/POD [--ports P[,P...]] | heal NS/POD | wipe NS/PVC
            (--ports cuts only the Pod's TCP traffic on those ports, both ways;
            heal lifts every cut of the Pod)
  image     add REF DIR | load FILE | list   (imported into every node)

Every command takes --dir (default <repo>/.sandbox). Run "sandbox COMMAND -h" for its flags.
`

func main() {
	// The Kubernetes clients the sandbox uses log nothing of their own.
	ctrllog.SetLogger(logr.Discard())
	if enteringNetns() {
		err := namespace.ReexecInNetns()
		fmt.Fprintln(os.Stderr, "sandbox daemon:", err)
		os.Exit(1)
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "sandbox:", sandbox.ErrNotRoot)
		os.Exit(1)
	}
	os.Exit(runMain(os.Args[1], os.Args[2:]))
}

// runMain runs one command and returns the exit code: 2 for usage errors.
func runMain(cmd string, args []string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	err := run(ctx, cmd, args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "sandbox %s: %v\n", cmd, err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, cmd string, args []string) error {
	switch cmd {
	case "up":
		return up(ctx, args)
	case "down":
		return down(ctx, args)
	case "status":
		return status(ctx, args)
	case "fault":
		return fault(ctx, args)
	case "image":
		return image(ctx, args)
	case "daemon":
		return daemonCmd(args)
	}
	return usageError{fmt.Sprintf("unknown command %q\n\n%s", cmd, usage)}
}

// flags makes a flag set with the --dir every command takes.
func flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("sandbox "+name, flag.ContinueOnError)
	dir := fs.String("dir", sandbox.DefaultDir(), "sandbox directory")
	return fs, dir
}

func up(ctx context.Context, args []string) error {
	fs, dir := flags("up")
	var cfg sandbox.Config
	fs.IntVar(&cfg.Nodes, "nodes", 3, "number of nodes")
	fs.StringVar(&cfg.Name, "name", "", "instance id, 1-6 of [a-z0-9] (default derived from --dir)")
	fs.StringVar(&cfg.PodCIDR, "pod-cidr", "", "IPv4 /16 for Pod IPs (default a free 10.x.0.0/16 derived from the name)")
	fs.DurationVar(&cfg.MaxBackoff, "max-backoff", 0, "cap of CrashLoopBackOff (default the kubelet's 5m)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "how long to wait for the nodes (default 5m)")
	var with addons
	fs.Var(&with, "with", "also install an add-on and wait until it is ready (repeatable or comma-separated): "+strings.Join(knownAddons, ", "))
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg.Dir = *dir
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Binary = self
	s, err := sandbox.Up(ctx, cfg)
	if err != nil {
		return err
	}
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("sandbox %s is up: %d nodes Ready, API server %s, Pod CIDR %s\n", st.Name, len(st.Nodes), st.APIServer, st.PodCIDR)
	fmt.Printf("kubeconfig: %s\n", s.Kubeconfig())
	return with.install(ctx, s)
}

func down(ctx context.Context, args []string) error {
	fs, dir := flags("down")
	name := fs.String("name", "", "instance id, if it was set at up and the directory is gone")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if err := sandbox.Down(ctx, *dir, *name); err != nil {
		return err
	}
	fmt.Println("sandbox is down")
	return nil
}

func status(ctx context.Context, args []string) error {
	fs, dir := flags("status")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	s, err := sandbox.Open(*dir)
	if err != nil {
		return err
	}
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	state := "starting"
	if st.Ready {
		state = "ready"
	}
	if st.Error != "" {
		state = "failed: " + st.Error
	}
	fmt.Printf("sandbox %s (%s): %s\n  daemon pid %d, API server %s, Pod CIDR %s\n  kubeconfig %s\n  logs %s\n",
		st.Name, st.Dir, state, st.PID, st.APIServer, st.PodCIDR, st.Kubeconfig, s.LogDir())
	for _, n := range st.Nodes {
		run := "running"
		if !n.Running {
			run = "stopped"
		}
		fmt.Printf("  %s: %s, kubelet at %s\n", n.Name, run, n.Address)
	}
	fmt.Printf("  images: %s\n", strings.Join(st.Images, ", "))
	return nil
}

// parse parses flags and checks the number of positional arguments (want
// < 0: at least -want).
func parse(fs *flag.FlagSet, args []string, want int) error {
	if err := fs.Parse(reorder(args)); err != nil {
		return usageError{err.Error()}
	}
	n := fs.NArg()
	if (want >= 0 && n != want) || (want < 0 && n < -want) {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	return nil
}

// reorder moves flags before positional arguments, so `fault kill ns/p
// --dir D` works like `fault kill --dir D ns/p`.
func reorder(args []string) []string {
	var flagArgs, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flagArgs = append(flagArgs, a)
			if !strings.Contains(a, "=") && i+1 < len(args) {
				flagArgs = append(flagArgs, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flagArgs, pos...)
}
