package kubectletcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// security is how the plugin authenticates to etcd, and where it learnt
// that, for error messages.
type security struct {
	TLS       *tls.Config
	TLSFrom   string
	Username  string
	Password  string
	CredsFrom string
}

// discoverTLS reads the client TLS of a cluster from its Secrets, as the
// operator does; for a Pod the operator did not create, from the Pod's own
// etcd flags and the Secret volumes behind them.
func discoverTLS(ctx context.Context, r client.Reader, c *v1alpha2.EtcdCluster, pod *corev1.Pod) (*tls.Config, string, error) {
	if c != nil {
		// The members say which material they run: during a TLS hand-over
		// some still serve the old.
		var members []*v1alpha2.EtcdMember
		list := &v1alpha2.EtcdMemberList{}
		if err := r.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{manifest.LabelCluster: c.Name}); err == nil {
			for i := range list.Items {
				members = append(members, &list.Items[i])
			}
		}
		cfg, err := etcdconn.TLS(ctx, r, c, members...)
		if err != nil {
			return nil, "", fmt.Errorf("client TLS of etcdcluster %s: %w", c.Name, err)
		}
		return cfg, "the Secrets of etcdcluster " + c.Name, nil
	}
	if pod == nil {
		return nil, "", nil
	}
	return podTLS(ctx, r, pod)
}

// podTLS derives client TLS from the etcd container's flags: --cert-file
// turns TLS on and names the mounted Secret whose ca.crt verifies the server;
// --client-cert-auth (or --trusted-ca-file) asks for a client certificate,
// for which the server's own key pair from the same Secret serves.
func podTLS(ctx context.Context, r client.Reader, pod *corev1.Pod) (*tls.Config, string, error) {
	c := etcdContainer(pod)
	if c == nil {
		return nil, "", fmt.Errorf("pod %s has no container named %q", pod.Name, manifest.EtcdContainer)
	}
	flags := parseFlags(append(append([]string(nil), c.Command...), c.Args...))
	certFile := flags["cert-file"]
	if certFile == "" {
		return nil, "", nil
	}
	secretName, err := secretBehind(pod, c, certFile)
	if err != nil {
		return nil, "", err
	}
	s, err := getSecret(ctx, r, pod.Namespace, secretName)
	if err != nil {
		return nil, "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return nil, "", fmt.Errorf("secret %s (mounted for --cert-file of pod %s) has no usable ca.crt", secretName, pod.Name)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	_, trusted := flags["trusted-ca-file"]
	if auth, set := flags["client-cert-auth"]; (set && auth != "false") || trusted {
		cert, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			return nil, "", fmt.Errorf("secret %s: etcd asks for a client certificate and the Secret has no usable tls.crt/tls.key: %w", secretName, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, "secret " + secretName + " mounted in pod " + pod.Name, nil
}

func etcdContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == manifest.EtcdContainer {
			return &pod.Spec.Containers[i]
		}
	}
	if len(pod.Spec.Containers) == 1 {
		return &pod.Spec.Containers[0]
	}
	return nil
}

// parseFlags reads --name=value, --name value and bare --name (as "")
// from a command line.
func parseFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			continue
		}
		if name, value, found := strings.Cut(a, "="); found {
			out[name] = value
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[a] = args[i+1]
			i++
			continue
		}
		out[a] = ""
	}
	return out
}

// secretBehind finds the Secret volume mounted where path lives.
func secretBehind(pod *corev1.Pod, c *corev1.Container, path string) (string, error) {
	best := ""
	volume := ""
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		if strings.HasPrefix(path, dir) && len(dir) > len(best) {
			best, volume = dir, m.Name
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret.SecretName, nil
		}
	}
	return "", fmt.Errorf("pod %s: no Secret volume is mounted at %s (its --cert-file); pass the cluster with -c if the operator runs it", pod.Name, path)
}

// discoverCredentials: the Secret given with -s (name or namespace/name)
// wins; otherwise a cluster whose auth the operator has enabled
// (spec.auth.enabled and status.authEnabled) lends its root credentials.
func discoverCredentials(ctx context.Context, r client.Reader, namespace, flag string, c *v1alpha2.EtcdCluster) (user, password, from string, err error) {
	if flag != "" {
		ns, name := namespace, flag
		if before, after, ok := strings.Cut(flag, "/"); ok {
			ns, name = before, after
		}
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return "", "", "", fmt.Errorf("--credentials-secret %q: want NAME or NAMESPACE/NAME", flag)
		}
		user, password, err = credentialsFrom(ctx, r, ns, name)
		return user, password, "secret " + ns + "/" + name, err
	}
	if c == nil || c.Spec.Auth == nil || !c.Spec.Auth.Enabled || !c.Status.AuthEnabled || c.Spec.Auth.RootCredentialsSecretRef == nil {
		return "", "", "", nil
	}
	name := c.Spec.Auth.RootCredentialsSecretRef.Name
	user, password, err = credentialsFrom(ctx, r, c.Namespace, name)
	return user, password, "secret " + name + " (spec.auth of etcdcluster " + c.Name + ")", err
}

func credentialsFrom(ctx context.Context, r client.Reader, ns, name string) (string, string, error) {
	s, err := getSecret(ctx, r, ns, name)
	if err != nil {
		return "", "", err
	}
	password := string(s.Data[corev1.BasicAuthPasswordKey])
	if password == "" {
		return "", "", fmt.Errorf("secret %s/%s has no %q key: a basic-auth Secret with the etcd user's password is needed", ns, name, corev1.BasicAuthPasswordKey)
	}
	user := string(s.Data[corev1.BasicAuthUsernameKey])
	if user == "" {
		user = "root"
	}
	return user, password, nil
}

func getSecret(ctx context.Context, r client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %q not found in namespace %q", name, ns)
		}
		return nil, fmt.Errorf("reading secret %s/%s: %w", ns, name, err)
	}
	return s, nil
}
