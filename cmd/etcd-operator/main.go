// Command etcd-operator runs the controllers of the etcd-operator.cozystack.io
// API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	clustercontroller "github.com/seed74754924/etcd-operator/internal/controller/cluster"
	defragcontroller "github.com/seed74754924/etcd-operator/internal/controller/defrag"
	membercontroller "github.com/seed74754924/etcd-operator/internal/controller/member"
	"github.com/seed74754924/etcd-operator/internal/dataguard"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
	"github.com/seed74754924/etcd-operator/internal/secretcache"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// options are the command-line settings of the manager.
type options struct {
	metricsAddr, probeAddr string
	pprofAddr              string
	metricsSecure          bool
	leaderElect            bool
	clusterDomain          string
	operatorImage          string
	etcdRepository         string
	watchNamespaces        string
	toolsVolume            string
	clusterWorkers         int
	metricsCertDir         string
	leaderElectionID       string
	memberWorkers          int
}

// defaultLeaderElectionID names the leader-election Lease. It never
// changes: an operator upgrade whose new Pod took another Lease would act
// beside the old one until that stopped.
const defaultLeaderElectionID = "aa20b3a9.etcd-operator.cozystack.io"

func main() {
	if code, ok := runAgent(os.Args[1:]); ok {
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "guard-data" {
		os.Exit(dataguard.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 {
		if sub, ok := subcommands[os.Args[1]]; ok {
			if err := sub(ctrl.SetupSignalHandler(), os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	opts := options{}
	fs := flag.CommandLine
	fs.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&opts.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS (a self-signed certificate) to callers the API server authenticates and authorizes to get /metrics; false serves plain HTTP to anyone.")
	fs.StringVar(&opts.metricsCertDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key to serve metrics with (a cert-manager Secret mounted there: rotated files are picked up); "+
		"empty: a self-signed certificate the operator makes itself. Needs --metrics-secure.")
	fs.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.StringVar(&opts.pprofAddr, "pprof-bind-address", "0", "Address Go's profiling endpoints (/debug/pprof/) bind to, unauthenticated; 0 (the default) disables them.")
	fs.BoolVar(&opts.leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time.")
	fs.StringVar(&opts.leaderElectionID, "leader-election-id", defaultLeaderElectionID,
		"Name of the leader-election Lease, in the operator's namespace: operators that watch different namespaces from one namespace need different names.")
	fs.StringVar(&opts.clusterDomain, "cluster-domain", "", "Cluster DNS domain for certificate names; detected from /etc/resolv.conf when empty, else cluster.local.")
	fs.StringVar(&opts.operatorImage, "operator-image", os.Getenv("OPERATOR_IMAGE"), "Image of this operator, used for agents in Jobs and init containers.")
	fs.StringVar(&opts.etcdRepository, "etcd-image-repository", os.Getenv("ETCD_IMAGE_REPOSITORY"), "Repository of etcd images (tag v<version>); quay.io/coreos/etcd when empty.")
	fs.StringVar(&opts.toolsVolume, "tools-volume", manifest.ToolsVolumeAuto, "How a member's Pod gets the operator's binary, which its data guard runs: "+
		"image (the operator's image mounted as an image volume: kubelet 1.35 and containerd 2.1 or CRI-O 1.31 or newer), "+
		"copy (an init container copies it, a second or more per Pod start), or auto (image when every node reports such versions).")
	fs.StringVar(&opts.watchNamespaces, "watch-namespace", os.Getenv("WATCH_NAMESPACE"), "Comma-separated namespaces to watch; all when empty.")
	fs.IntVar(&opts.clusterWorkers, "cluster-workers", clustercontroller.DefaultWorkers,
		"EtcdClusters reconciled at once. A pass whose members do not answer holds its worker for the etcd calls' timeout (2 s): raise it for fleets where many clusters can be unreachable at once.")
	fs.IntVar(&opts.memberWorkers, "member-workers", membercontroller.DefaultWorkers,
		"EtcdMembers reconciled at once. A member whose etcd does not answer holds its worker for its status call's timeout (1 to 5 s).")
	showVersion := fs.Bool("version", false, "Print the operator's version and exit.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(fs)
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	if opts.clusterWorkers < 1 || opts.memberWorkers < 1 {
		fmt.Fprintf(os.Stderr, "--cluster-workers (%d) and --member-workers (%d) must be at least 1\n", opts.clusterWorkers, opts.memberWorkers)
		os.Exit(2)
	}
	if opts.metricsCertDir != "" && !opts.metricsSecure {
		fmt.Fprintln(os.Stderr, "--metrics-cert-dir needs --metrics-secure: plain-HTTP metrics have no certificate")
		os.Exit(2)
	}
	if opts.leaderElect && opts.leaderElectionID == "" {
		fmt.Fprintln(os.Stderr, "--leader-election-id must not be empty with --leader-elect")
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), opts); err != nil {
		ctrl.Log.Error(err, "The operator stopped")
		os.Exit(1)
	}
}

// metricsOptions serves the metrics securely unless asked not to: HTTPS,
// and each request's bearer token reviewed by the API server (TokenReview)
// and its right to get the non-resource URL /metrics checked
// (SubjectAccessReview).
func metricsOptions(opts options) metricsserver.Options {
	o := metricsserver.Options{BindAddress: opts.metricsAddr}
	if opts.metricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		if opts.metricsCertDir != "" {
			o.CertDir, o.CertName, o.KeyName = opts.metricsCertDir, "tls.crt", "tls.key"
		}
	}
	return o
}

// metricsCertProblem says why a metrics certificate directory cannot be
// served from. controller-runtime falls back to a self-signed certificate
// when the files are missing, which a scraper that verifies refuses: better
// said at start than found in a failing scrape.
func metricsCertProblem(dir string) error {
	if dir == "" {
		return nil
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("--metrics-cert-dir %s: %w (it must hold tls.crt and tls.key, as a kubernetes.io/tls Secret mounted there does)", dir, err)
		}
	}
	return nil
}

func run(ctx context.Context, opts options) error {
	if opts.operatorImage == "controller:latest" {
		return errors.New("--operator-image is the kustomize placeholder controller:latest; set it to the real image")
	}
	if err := metricsCertProblem(opts.metricsCertDir); err != nil {
		return err
	}
	if !slices.Contains(manifest.ToolsVolumes, opts.toolsVolume) {
		return fmt.Errorf("--tools-volume is %q; it takes one of %s", opts.toolsVolume, strings.Join(manifest.ToolsVolumes, ", "))
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	m := metrics.New(crmetrics.Registry, version)
	opts.clusterDomain = clusterDomain(opts.clusterDomain)
	ctrl.Log.Info("Starting etcd-operator", "version", version, "watchNamespaces", opts.watchNamespaces, "clusterDomain", opts.clusterDomain)
	return runLives(ctx, opts, scheme, m)
}

// lifeHooks wrap the clients of one manager life. The release build has
// none; the test build (tag faultinjection) ends a life after a mutation.
type lifeHooks interface {
	Client(client.WithWatch) client.WithWatch
	Dialer(etcd.Dialer) etcd.Dialer
	// Injecting reports whether this life may end by injection, so the
	// next registers the same controllers again.
	Injecting() bool
}

// noHooks wraps nothing.
type noHooks struct{}

func (noHooks) Client(c client.WithWatch) client.WithWatch { return c }
func (noHooks) Dialer(d etcd.Dialer) etcd.Dialer           { return d }
func (noHooks) Injecting() bool                            { return false }

// runLife runs one manager until ctx ends: fresh caches, fresh controllers.
func runLife(ctx context.Context, opts options, scheme *runtime.Scheme, m *metrics.Metrics, hooks lifeHooks) error {
	restCfg := ctrl.GetConfigOrDie()
	// Every request of the manager's clients, caches, leader election and
	// metrics reviews is counted by verb and resource.
	restCfg.Wrap(m.Requests.Transport)
	watch := liveNamespaces(ctx, restCfg, opts.watchNamespaces)
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions(opts),
		HealthProbeBindAddress:        opts.probeAddr,
		PprofBindAddress:              opts.pprofAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              opts.leaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(watch),
		// Controller names are unique per process; a new life registers
		// the same controllers again.
		Controller: config.Controller{SkipNameValidation: ptr.To(hooks.Injecting())},
		NewClient: func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, o)
			if err != nil {
				return nil, err
			}
			return hooks.Client(m.Requests.Client(c)), nil
		},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := setup(ctx, mgr, opts, m, hooks); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func setup(ctx context.Context, mgr ctrl.Manager, opts options, m *metrics.Metrics, hooks lifeHooks) error {
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	dial := hooks.Dialer(etcd.Dial)
	// Secrets come from a reader that asks the API server only for those
	// whose watched metadata changed; everything else the controllers read
	// past the cache goes straight through.
	secrets := secretcache.New(mgr.GetCache(), m.Requests.Reader(mgr.GetAPIReader(), mgr.GetScheme()))
	if err := secrets.ForgetDeleted(ctx, mgr.GetCache()); err != nil {
		return fmt.Errorf("watching Secrets' metadata: %w", err)
	}
	var reader client.Reader = secrets
	cr := &clustercontroller.Reconciler{
		Client: mgr.GetClient(), APIReader: reader,
		Recorder: mgr.GetEventRecorder("etcd-operator"), Dial: dial, Metrics: m, OperatorImage: opts.operatorImage,
		ClusterDomain: opts.clusterDomain, Workers: opts.clusterWorkers,
	}
	if err := cr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdCluster controller: %w", err)
	}
	mr := &membercontroller.Reconciler{
		Client: mgr.GetClient(), APIReader: reader,
		Recorder: mgr.GetEventRecorder("etcd-operator"), Dial: dial, EtcdRepository: opts.etcdRepository,
		OperatorImage: opts.operatorImage, ToolsVolume: opts.toolsVolume, Metrics: m, Workers: opts.memberWorkers,
	}
	if err := mr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdMember controller: %w", err)
	}
	if err := setupSnapshots(mgr, opts, reader, m); err != nil {
		return err
	}
	dr := &defragcontroller.Reconciler{
		Client: mgr.GetClient(), APIReader: reader,
		Recorder: mgr.GetEventRecorder("etcd-operator"), Dial: dial, Metrics: m,
	}
	if err := dr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdDefrag controller: %w", err)
	}
	if err := setupDefragPolicies(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}

// liveNamespaces drops from a watch list the namespaces that are gone or
// being deleted: with namespaced rights their Role goes with them, their
// cache could never sync, and the manager would never start its
// controllers. (A namespace created again later is watched after the next
// restart.) Namespaces that cannot be checked stay; so does the whole list
// if none is left, rather than widen the watch to every namespace.
func liveNamespaces(ctx context.Context, cfg *rest.Config, watch string) string {
	if watch == "" {
		return ""
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return watch
	}
	var live []string
	for _, name := range strings.Split(watch, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		ns := &corev1.Namespace{}
		err := c.Get(ctx, client.ObjectKey{Name: name}, ns)
		if apierrors.IsNotFound(err) || (err == nil && ns.DeletionTimestamp != nil) {
			ctrl.Log.Info("Not watching a namespace that is gone or being deleted", "namespace", name)
			continue
		}
		live = append(live, name)
	}
	if len(live) == 0 {
		return watch
	}
	return strings.Join(live, ",")
}

// cacheOptions scopes the cache: to the watched namespaces, and for Pods,
// PVCs, Services, PDBs and EndpointSlices to the objects the operator manages,
// so memory does not grow with unrelated workloads; Secrets are watched for
// their metadata only. No object keeps its managedFields in the cache: no
// controller reads them, and they are often the larger part of a small
// object (an update that omits them leaves them as they are).
func cacheOptions(watch string) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{manifest.LabelManagedBy: manifest.ManagedBy})
	o := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: managed},
		&corev1.PersistentVolumeClaim{}: {Label: managed},
		&corev1.Service{}:               {Label: managed},
		&policyv1.PodDisruptionBudget{}: {Label: managed},
		&batchv1.Job{}:                  {Label: managed},
		// Kubernetes copies a Service's labels onto its EndpointSlices, so the
		// headless Services' slices carry the operator's label too.
		&discoveryv1.EndpointSlice{}: {Label: managed},
		// Secrets: their metadata only, slimmed (see package secretcache).
		secretcache.Metadata(): {Transform: secretcache.Slim},
	}}
	if watch != "" {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(watch, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				o.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}
	return o
}
