package kubectletcd

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// addKubeFlags registers kubectl's flags for reaching the API server
// (--kubeconfig, --context, -n, --as, --token, --server, --request-timeout,
// the TLS flags, ...) on flags and returns them.
//
// Three of kubectl's spellings meet flags the plugin had before it took
// kubectl's: -c/--cluster names the EtcdCluster, so the kubeconfig cluster is
// --kubeconfig-cluster; -s is --credentials-secret, so --server has no short
// form; and --kubeconfig keeps its -k.
func addKubeFlags(flags *pflag.FlagSet) *genericclioptions.ConfigFlags {
	kube := genericclioptions.NewConfigFlags(true)
	kube.KubeConfig, kube.ClusterName, kube.APIServer = nil, nil, nil
	kube.AddFlags(flags)
	flags.Lookup("namespace").Usage = "namespace of the Pod or cluster (default: the kubeconfig context's, then default)"
	kube.KubeConfig, kube.ClusterName, kube.APIServer = new(string), new(string), new(string)
	flags.StringVarP(kube.KubeConfig, "kubeconfig", "k", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	flags.StringVar(kube.ClusterName, "kubeconfig-cluster", "", "the name of the kubeconfig cluster to use (kubectl's --cluster; -c/--cluster names the EtcdCluster)")
	flags.StringVar(kube.APIServer, "server", "", "the address and port of the Kubernetes API server")
	return kube
}

// kubeConfig is the REST config and the namespace the kubeconfig flags give:
// -n, else the context's namespace, else default.
func (a *app) kubeConfig() (*rest.Config, string, error) {
	cfg, err := a.kube.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := a.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return cfg, ns, nil
}
