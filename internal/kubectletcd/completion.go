package kubectletcd

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/build"
)

// registerCompletions completes -p with the namespace's etcd member Pods, -c
// with its EtcdClusters, -n with namespaces and -s with basic-auth Secrets.
func (a *app) registerCompletions(root *cobra.Command) {
	complete := func(list func(ctx context.Context, d deps) []string) cobra.CompletionFunc {
		return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			d, err := a.connect(&a.opts)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out []cobra.Completion
			for _, name := range list(ctx, d) {
				if strings.HasPrefix(name, prefix) {
					out = append(out, name)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = root.RegisterFlagCompletionFunc("pod", complete(func(ctx context.Context, d deps) []string {
		list := &corev1.PodList{}
		if d.kube.List(ctx, list, client.InNamespace(d.namespace), client.HasLabels{build.LabelCluster}) != nil {
			return nil
		}
		var out []string
		for _, p := range list.Items {
			out = append(out, p.Name)
		}
		return out
	}))
	_ = root.RegisterFlagCompletionFunc("cluster", complete(func(ctx context.Context, d deps) []string {
		list := &v1alpha2.EtcdClusterList{}
		if d.kube.List(ctx, list, client.InNamespace(d.namespace)) != nil {
			return nil
		}
		var out []string
		for _, c := range list.Items {
			out = append(out, c.Name)
		}
		return out
	}))
	_ = root.RegisterFlagCompletionFunc("namespace", complete(func(ctx context.Context, d deps) []string {
		list := &corev1.NamespaceList{}
		if d.kube.List(ctx, list) != nil {
			return nil
		}
		var out []string
		for _, n := range list.Items {
			out = append(out, n.Name)
		}
		return out
	}))
	_ = root.RegisterFlagCompletionFunc("credentials-secret", complete(func(ctx context.Context, d deps) []string {
		list := &corev1.SecretList{}
		if d.kube.List(ctx, list, client.InNamespace(d.namespace)) != nil {
			return nil
		}
		var out []string
		for _, s := range list.Items {
			if s.Type == corev1.SecretTypeBasicAuth || len(s.Data[corev1.BasicAuthPasswordKey]) > 0 {
				out = append(out, s.Name)
			}
		}
		return out
	}))
}
