// Command etcd-migrate adopts live etcd.aenix.io/v1alpha1 clusters into
// etcd-operator in place: dry run by default, --apply to carry it out. See
// docs/migration.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/migrate"
	"github.com/seed74754924/etcd-operator/internal/portforward"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func execute(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	klog.SetLogger(logr.Discard())
	var (
		o          migrate.Options
		kubeconfig string
		kubeCtx    string
		code       int
	)
	root := &cobra.Command{
		Use:   "etcd-migrate",
		Short: "Adopt live etcd.aenix.io/v1alpha1 clusters into etcd-operator in place",
		Long: `etcd-migrate finds every etcd.aenix.io/v1alpha1 EtcdCluster, asks its etcd who
its members are, and prints what it would create, what it cannot carry over and
what changes. With --apply it hands the running Pods and volumes to a new
EtcdCluster and one EtcdMember per member, without restarting any Pod or
touching etcd's membership. Both operators must be scaled to zero first: the
Deployments --legacy-operator and --operator name must exist at zero replicas,
and no Deployment in any namespace may run the legacy operator's image. The
legacy operator's webhook configurations, which fail every write to its
objects once it is stopped, must be deleted (the run lists them).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := connect(kubeconfig, kubeCtx)
			if err != nil {
				return err
			}
			code = migrate.Run(cmd.Context(), env, o, in, out, errOut)
			return nil
		},
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of etcd-migrate",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version) },
	})
	f := root.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "path to the kubeconfig (default $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&kubeCtx, "context", "", "kubeconfig context to use")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "only clusters in this namespace (default: all namespaces)")
	f.BoolVar(&o.Apply, "apply", false, "carry the plan out (default: dry run, nothing changes)")
	f.BoolVarP(&o.Yes, "yes", "y", false, "do not ask for confirmation")
	f.StringVar(&o.LegacyOperator, "legacy-operator", "etcd-operator-system/etcd-operator-controller-manager", "namespace/name of the legacy operator's Deployment, which must exist and be scaled to zero (with Helm: <fullname>-controller-manager)")
	f.StringVar(&o.Operator, "operator", "etcd-operator-system/etcd-operator", "namespace/name of the new operator's Deployment, which must exist and be scaled to zero")
	f.BoolVar(&o.SkipOperatorCheck, "skip-operator-check", false, "do not check that the operators are stopped: neither the two Deployments named nor the Deployments running the legacy operator's image in any namespace")
	f.StringVar(&o.Version, "version", "", "etcd version (X.Y.Z) for every cluster, instead of the running image's tag")
	f.BoolVar(&o.SkipBackup, "skip-backup", false, "do not save a safety snapshot before adopting")
	f.StringVar(&o.BackupDir, "backup-dir", ".", "directory for the safety snapshots (<namespace>_<name>_<clusterID>.db)")
	f.StringVar(&o.StopAfter, "stop-after", "", "stop after the named step (for tests)")
	_ = f.MarkHidden("stop-after")
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(errOut, "Error:", err)
		return 2
	}
	return code
}

func connect(kubeconfig, kubeCtx string) (migrate.Env, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeCtx})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return migrate.Env{}, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return migrate.Env{}, err
	}
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		return migrate.Env{}, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return migrate.Env{}, fmt.Errorf("connecting to the API server: %w", err)
	}
	fw, err := portforward.NewAPIForwarder(cfg)
	if err != nil {
		return migrate.Env{}, err
	}
	return migrate.Env{Client: kube, Forwarder: fw, Dial: etcd.DialMaintenance}, nil
}
