package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	_ "time/tzdata" // schedules name IANA time zones; the image has no zoneinfo

	// The image has no CA certificates either: the snapshot agents verify
	// S3 endpoints over HTTPS against these roots when the system has none.
	_ "golang.org/x/crypto/x509roots/fallback"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/agent"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	schedulecontroller "github.com/seed74754924/etcd-operator/internal/controller/schedule"
	snapshotcontroller "github.com/seed74754924/etcd-operator/internal/controller/snapshot"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// Agent subcommands: the operator's image (or binary) runs them in the
// snapshot Job, in a restored seed's init containers and (copied into the
// etcd image) in a snapshot's verification Job.
const (
	cmdSnapshotAgent = "snapshot-agent"
	cmdRestoreAgent  = "restore-agent"
	cmdVerifyAgent   = "verify-agent"
	cmdInstallTools  = "install-tools"
)

// agentMemoryLimit is the agents' soft memory limit; the snapshot Job's
// container limit (256 MiB) is well above it.
const agentMemoryLimit = 48 << 20

// agentRun runs one agent with its logger and returns its exit code;
// finish records a result in the termination log.
type agentRun func(ctx context.Context, log *slog.Logger, finish func(report.Result, int) int) int

// configured is an agent that reads its configuration from the
// environment (a bad one is a failed run) and then runs.
func configured[C any](load func(func(string) string) (C, error), run func(context.Context, C, *slog.Logger) (report.Result, int)) agentRun {
	return func(ctx context.Context, log *slog.Logger, finish func(report.Result, int) int) int {
		cfg, err := load(os.Getenv)
		if err != nil {
			return finish(failed(err))
		}
		return finish(run(ctx, cfg, log))
	}
}

// agents are the subcommands runAgent knows, by name.
var agents = map[string]agentRun{
	cmdSnapshotAgent: configured(agent.SnapshotConfigFromEnv, agent.Snapshot),
	cmdRestoreAgent:  configured(agent.RestoreConfigFromEnv, agent.Restore),
	cmdVerifyAgent:   configured(agent.VerifyConfigFromEnv, agent.VerifySnapshot),
	cmdInstallTools: func(_ context.Context, log *slog.Logger, _ func(report.Result, int) int) int {
		if err := agent.InstallTools(os.Getenv(agentenv.EnvToolsDir)); err != nil {
			log.Error("Could not install the agent", "error", err)
			return report.ExitTransient
		}
		return 0
	},
}

// runAgent runs the agent named by the first argument, if any, and returns
// its exit code; ok is false when the arguments name no agent.
func runAgent(args []string) (code int, ok bool) {
	// Before anything else: the manager's own arguments name no agent, and
	// nothing below (the agents' memory limit above all) may touch it.
	if len(args) == 0 {
		return 0, false
	}
	run, ok := agents[args[0]]
	if !ok {
		return 0, false
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("agent", args[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	agent.Version = version
	// The verification agent holds etcd's index of every key while it
	// counts and hashes them: its memory follows the key count, and its
	// Job's limit is set for that.
	if os.Getenv("GOMEMLIMIT") == "" && args[0] != cmdVerifyAgent {
		// An agent's live memory is a few buffers (two multipart parts at
		// most): collect garbage before the heap grows far past them,
		// rather than at twice the peak as by default.
		debug.SetMemoryLimit(agentMemoryLimit)
	}
	return run(ctx, log, finisher(log)), true
}

func failed(err error) (report.Result, int) {
	return report.Result{Reason: conditions.ReasonAgentMisconfigured, Message: err.Error()}, report.ExitPermanent
}

// finisher returns the function that leaves an agent's result in the
// termination message (and on stdout) and returns its exit code.
func finisher(log *slog.Logger) func(report.Result, int) int {
	return func(res report.Result, code int) int {
		path := os.Getenv(agentenv.EnvTerminationLog)
		if path == "" {
			path = report.Path
		}
		if err := report.Write(path, res); err != nil {
			log.Warn("Could not write the termination message", "path", path, "error", err)
		}
		fmt.Println(string(res.Encode()))
		if res.Failed() {
			log.Error("Failed", "reason", res.Reason, "message", res.Message)
		}
		return code
	}
}

// setupSnapshots registers the EtcdSnapshot and EtcdSnapshotSchedule
// controllers.
func setupSnapshots(mgr ctrl.Manager, opts options, reader client.Reader, m *metrics.Metrics) error {
	sr := &snapshotcontroller.Reconciler{
		Client: mgr.GetClient(), APIReader: reader, Recorder: mgr.GetEventRecorder("etcd-operator"),
		OperatorImage: opts.operatorImage, EtcdRepository: opts.etcdRepository, Metrics: m,
	}
	if err := sr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdSnapshot controller: %w", err)
	}
	sc := &schedulecontroller.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("etcd-operator")}
	if err := sc.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdSnapshotSchedule controller: %w", err)
	}
	return nil
}
