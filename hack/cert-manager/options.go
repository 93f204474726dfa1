package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
)

// options are this binary's flags. Their defaults are upstream's controller
// defaults (internal/apis/config/controller/v1alpha1/defaults.go in
// cert-manager v1.21) wherever the option exists there.
type options struct {
	kubeconfig               string
	namespace                string
	clusterResourceNamespace string
	workers                  int
	healthAddress            string
	leaderElect              bool
	leaderElectionNamespace  string
	minBackoff, maxBackoff   time.Duration
	enableOwnerRef           bool
}

func parseFlags(args []string) options {
	fs := flag.NewFlagSet("cert-manager-controller", flag.ExitOnError)
	var o options
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.StringVar(&o.namespace, "namespace", "", "Only watch this namespace; empty means every namespace.")
	fs.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "kube-system",
		"Namespace holding the Secrets that ClusterIssuers refer to (a CA ClusterIssuer's key pair).")
	fs.IntVar(&o.workers, "concurrent-workers", 5, "Workers per controller.")
	fs.StringVar(&o.healthAddress, "health-address", "0.0.0.0:9403", "Address serving /livez and /readyz.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Run only while holding the cert-manager-controller Lease.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "kube-system", "Namespace of the leader-election Lease.")
	fs.DurationVar(&o.minBackoff, "certificate-request-minimum-backoff-duration", time.Hour,
		"Backoff after the first failed issuance of a Certificate; doubles per failure.")
	fs.DurationVar(&o.maxBackoff, "certificate-request-maximum-backoff-duration", 32*time.Hour, "Upper bound of that backoff.")
	fs.BoolVar(&o.enableOwnerRef, "enable-certificate-owner-ref", false,
		"Give each Certificate's Secret an owner reference to the Certificate, so deleting one deletes the other.")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return o
}

// contextOptions maps the flags onto cert-manager's controller context. The
// ACME, ingress-shim and Gateway API options stay zero because none of those
// controllers run here.
func (o options) contextOptions() controllerpkg.ContextOptions {
	return controllerpkg.ContextOptions{
		Kubeconfig:         o.kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          o.namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: o.clusterResourceNamespace,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef:                           o.enableOwnerRef,
			CertificateRequestMinimumBackoffDuration: o.minBackoff,
			CertificateRequestMaximumBackoffDuration: o.maxBackoff,
			// Upstream's default: copy every annotation but those kubectl,
			// Flux and Argo CD write.
			CopiedAnnotationPrefixes: []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
		},
	}
}
