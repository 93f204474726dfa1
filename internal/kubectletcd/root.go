// Package kubectletcd is the kubectl plugin for day-two work on etcd clusters
// run by etcd-operator: status, membership, defragmentation, compaction,
// alarms, leadership and snapshots, on one member Pod (-p) or on a whole
// EtcdCluster (-c). It reaches members through the API server's
// port-forward, so a kubeconfig is all it needs.
package kubectletcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/portforward"
)

// Options are the global flags that choose the target; the flags that reach
// the API server are kubectl's own (genericclioptions.ConfigFlags).
type Options struct {
	Pod               string
	Cluster           string
	CredentialsSecret string
}

// app carries the flags and the seams tests replace.
type app struct {
	opts Options
	// kube are kubectl's flags for the API server: kubeconfig, context,
	// namespace, impersonation, token, TLS and so on.
	kube    *genericclioptions.ConfigFlags
	version string
	// connect builds the Kubernetes side from the flags (kubeDeps).
	connect func() (deps, error)
	// terminal reports whether w is a terminal (progress is shown only there).
	terminal func(w io.Writer) bool
	// pollEvery is how often a followed EtcdDefrag is read (0: defragPollEvery).
	pollEvery time.Duration
}

// Main runs the plugin with the process's arguments and returns its exit
// code: 0, 1 for a failure, 2 for a mistake in the command line.
func Main(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	// client-go logs through klog; what it says the plugin says itself.
	klog.SetLogger(logr.Discard())
	a := &app{version: version, terminal: isTerminal}
	a.connect = a.kubeDeps
	return a.execute(ctx, args, stdout, stderr)
}

func (a *app) execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "Error:", err)
	var usage usageError
	if errors.As(err, &usage) || isCobraUsage(err) {
		fmt.Fprintf(stderr, "See '%s --help'.\n", cmd.CommandPath())
		return 2
	}
	return 1
}

// isCobraUsage: cobra's own argument and flag errors carry no type; they are
// the errors returned before RunE ran.
func isCobraUsage(err error) bool {
	var ue flagError
	return errors.As(err, &ue)
}

type flagError struct{ error }

func (e flagError) Unwrap() error { return e.error }

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-etcd",
		Short: "Day-two work on etcd clusters run by etcd-operator",
		Long: `kubectl etcd inspects and maintains etcd clusters run by etcd-operator, on one
member Pod (-p) or on every member of an EtcdCluster (-c). It reaches members
through the API server's port-forward and finds TLS and credentials from the
EtcdCluster (or, for Pods the operator did not create, from the Pod's flags).`,
		Version:       a.version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The plugin is invoked as `kubectl etcd`.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl etcd"},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError{err} })
	f := root.PersistentFlags()
	a.kube = addKubeFlags(f)
	f.StringVarP(&a.opts.Pod, "pod", "p", "", "etcd member Pod to act on")
	f.StringVarP(&a.opts.Cluster, "cluster", "c", "", "EtcdCluster to act on, every member of it")
	f.StringVarP(&a.opts.CredentialsSecret, "credentials-secret", "s", "", "basic-auth Secret (NAME or NAMESPACE/NAME) with etcd credentials; username defaults to root")
	a.registerCompletions(root)
	root.AddCommand(
		a.statusCommand(), a.membersCommand(), a.defragCommand(), a.compactCommand(), a.alarmCommand(),
		a.forfeitLeadershipCommand(), a.leaveCommand(), a.removeMemberCommand(), a.addMemberCommand(), a.promoteMemberCommand(),
		a.snapshotCommand(), a.recoverCommand(), a.reportCommand(), a.versionCommand(),
	)
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

// wrapArgs marks cobra's argument-count errors as usage errors.
func wrapArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return flagError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

// withSession opens the command's target, runs fn and closes every
// connection it opened.
func (a *app) withSession(cmd *cobra.Command, fn func(ctx context.Context, s *session) error) error {
	d, err := a.connect()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := openSession(ctx, d, &a.opts)
	if err != nil {
		return err
	}
	s.progressTo = a.progressTo
	defer s.close()
	return fn(ctx, s)
}

// kubeDeps connects to the API server the kubeconfig flags name.
func (a *app) kubeDeps() (deps, error) {
	cfg, ns, err := a.kubeConfig()
	if err != nil {
		return deps{}, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return deps{}, err
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		return deps{}, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return deps{}, fmt.Errorf("connecting to the API server: %w", err)
	}
	fw, err := portforward.NewAPIForwarder(cfg)
	if err != nil {
		return deps{}, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return deps{}, fmt.Errorf("connecting to the API server: %w", err)
	}
	logs := func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
		return cs.CoreV1().Pods(namespace).GetLogs(pod, opts).DoRaw(ctx)
	}
	return deps{kube: kube, namespace: ns, forwarder: fw, dial: etcd.DialMaintenance, logs: logs}, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
