package kubectletcd

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// registerCompletions completes -p with the namespace's etcd member Pods, -c
// with its EtcdClusters, -n with namespaces and -s with basic-auth Secrets,
// and --context, --kubeconfig-cluster and --user from the kubeconfig.
func (a *app) registerCompletions(root *cobra.Command) {
	for flag, names := range map[string]func(context.Context, deps) ([]string, error){
		"pod":                memberPodNames,
		"cluster":            clusterNames,
		"namespace":          namespaceNames,
		"credentials-secret": credentialSecretNames,
	} {
		_ = root.RegisterFlagCompletionFunc(flag, a.completeWith(names))
	}
	for flag, names := range map[string]func(*clientcmdapi.Config) []string{
		"context":            func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Contexts)) },
		"kubeconfig-cluster": func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Clusters)) },
		"user":               func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.AuthInfos)) },
	} {
		_ = root.RegisterFlagCompletionFunc(flag, a.completeFromKubeconfig(names))
	}
}

// completeFromKubeconfig completes with names the kubeconfig holds.
func (a *app) completeFromKubeconfig(names func(*clientcmdapi.Config) []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		raw, err := a.kube.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		return withPrefix(names(&raw), prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

func (a *app) completeWith(names func(context.Context, deps) ([]string, error)) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		d, err := a.connect()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		all, err := names(ctx, d)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		return withPrefix(all, prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

// withPrefix are the names that start with prefix, sorted.
func withPrefix(names []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func memberPodNames(ctx context.Context, d deps) ([]string, error) {
	list := &corev1.PodList{}
	if err := d.kube.List(ctx, list, client.InNamespace(d.namespace), client.HasLabels{manifest.LabelCluster}); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out, nil
}

func clusterNames(ctx context.Context, d deps) ([]string, error) {
	list := &v1alpha2.EtcdClusterList{}
	if err := d.kube.List(ctx, list, client.InNamespace(d.namespace)); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, c.Name)
	}
	return out, nil
}

func namespaceNames(ctx context.Context, d deps) ([]string, error) {
	list := &corev1.NamespaceList{}
	if err := d.kube.List(ctx, list); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	return out, nil
}

func credentialSecretNames(ctx context.Context, d deps) ([]string, error) {
	list := &corev1.SecretList{}
	if err := d.kube.List(ctx, list, client.InNamespace(d.namespace)); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		if s.Type == corev1.SecretTypeBasicAuth || len(s.Data[corev1.BasicAuthPasswordKey]) > 0 {
			out = append(out, s.Name)
		}
	}
	return out, nil
}
