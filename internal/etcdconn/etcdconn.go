// Package etcdconn turns a cluster and its members into an etcd client
// configuration: endpoints from member DNS names and TLS from the cluster's
// Secrets, rebuilt on every dial so rotated certificates are picked up.
package etcdconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Config builds the configuration to reach the given members of a cluster.
// Secrets are read through r (the operator's secretcache); Pod addresses
// through pods (the cache), which may be nil.
func Config(ctx context.Context, r, pods client.Reader, c *v1alpha2.EtcdCluster, members []*v1alpha2.EtcdMember) (etcd.Config, error) {
	cfg := etcd.Config{}
	for _, m := range members {
		cfg.Endpoints = append(cfg.Endpoints, manifest.ClientURL(m))
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, errors.New("no member to connect to")
	}
	t, err := TLS(ctx, r, c, members...)
	if err != nil {
		return cfg, err
	}
	cfg.TLS = t
	cfg.Resolve = podAddresses(ctx, pods, c)
	if manifest.AuthWanted(c) {
		// Credentials go with every dial once there is a password, also
		// before authentication is latched: etcd answers a login with
		// "not enabled" then (the client goes on anonymous), and a cluster
		// restored from a snapshot of a cluster with auth checks
		// credentials from its first start.
		pw, err := AppliedPassword(ctx, r, c)
		switch {
		case err == nil:
			cfg.Username, cfg.Password = manifest.RootUser, pw
			cfg.LoginVia = voters(ctx, r, pods, c)
		case c.Status.AuthEnabled:
			return cfg, err
		}
	}
	return cfg, nil
}

// voters are the client URLs of the cluster's voting members, the ones that
// can log a user in. Read from the cache when there is one.
func voters(ctx context.Context, r, cache client.Reader, c *v1alpha2.EtcdCluster) []string {
	if cache == nil {
		cache = r
	}
	list := &v1alpha2.EtcdMemberList{}
	if err := cache.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{manifest.LabelCluster: c.Name}); err != nil {
		return nil
	}
	var out []string
	for i := range list.Items {
		if m := &list.Items[i]; m.Status.IsVoter && m.DeletionTimestamp.IsZero() {
			out = append(out, manifest.ClientURL(m))
		}
	}
	slices.Sort(out)
	return out
}

// WantedPassword is the root password the user's Secret holds.
func WantedPassword(ctx context.Context, r client.Reader, c *v1alpha2.EtcdCluster) (string, error) {
	name := c.Spec.Auth.RootCredentialsSecretRef.Name
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil {
		return "", fmt.Errorf("reading the root credentials Secret %s: %w", name, err)
	}
	if len(s.Data[manifest.KeyPassword]) == 0 {
		return "", fmt.Errorf("the root credentials Secret %s has no %s key", name, manifest.KeyPassword)
	}
	return string(s.Data[manifest.KeyPassword]), nil
}

// AppliedPassword is the root password etcd has, as the operator recorded
// it (see manifest.AppliedPasswordSecretName); the user's before any record.
func AppliedPassword(ctx context.Context, r client.Reader, c *v1alpha2.EtcdCluster) (string, error) {
	s := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: manifest.AppliedPasswordSecretName(c.Name)}, s)
	switch {
	case err == nil && len(s.Data[manifest.KeyPassword]) > 0:
		return string(s.Data[manifest.KeyPassword]), nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading the applied root password: %w", err)
	}
	return WantedPassword(ctx, r, c)
}

// podAddresses maps the DNS names of the cluster's member Pods to their IPs,
// read from the (cached) Pods of the cluster; a Pod without an IP yet maps
// to "", which the dialer refuses rather than asking the cluster's DNS
// about a name that does not exist yet (see etcd.ResolvingDialer).
func podAddresses(ctx context.Context, pods client.Reader, c *v1alpha2.EtcdCluster) func(string) (string, bool) {
	if pods == nil {
		return nil
	}
	list := &corev1.PodList{}
	if err := pods.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{manifest.LabelCluster: c.Name}); err != nil {
		return nil
	}
	byHost := map[string]string{}
	for _, p := range list.Items {
		if p.Spec.Hostname == "" || p.Spec.Subdomain == "" {
			continue
		}
		// A member's Pod being made again has the name of the one that
		// goes: an address wins over none.
		host := fmt.Sprintf("%s.%s.%s.svc", p.Spec.Hostname, p.Spec.Subdomain, p.Namespace)
		if p.Status.PodIP != "" || byHost[host] == "" {
			byHost[host] = p.Status.PodIP
		}
	}
	return func(host string) (string, bool) {
		ip, ok := byHost[host]
		return ip, ok
	}
}

// TLS returns the operator's client TLS configuration for a cluster, or nil
// when the client plane is plain. Given the members it is to reach, it
// trusts the CAs of the Secrets they mount and, during a TLS hand-over,
// of the trust Secret, and offers the client certificate from before the
// hand-over beside the new one: Go's TLS client presents the one whose
// issuer the member asks for.
func TLS(ctx context.Context, r client.Reader, c *v1alpha2.EtcdCluster, members ...*v1alpha2.EtcdMember) (*tls.Config, error) {
	mt := manifest.MemberTLSOf(c)
	if mt == nil || mt.ClientServerSecretRef == nil {
		return nil, nil
	}
	servers, trust := mountedServerSecrets(members)
	handingOver := trust != "" || len(servers) > 1 || len(servers) == 1 && servers[0] != mt.ClientServerSecretRef.Name
	if !handingOver {
		servers = []string{mt.ClientServerSecretRef.Name}
	}
	pool, err := rootCAs(ctx, r, c.Namespace, servers, trust, handingOver)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	names := []string{OperatorClientSecret(c)}
	if prev := c.Status.OperatorClientSecret; handingOver && prev != "" && prev != names[0] {
		names = append(names, prev)
	}
	if cfg.Certificates, err = clientCertificates(ctx, r, c.Namespace, names, handingOver); err != nil {
		return nil, err
	}
	return cfg, nil
}

// rootCAs pools the ca.crt of the server Secrets and the client CAs of
// the trust Secret. Out of a hand-over the one server Secret must be
// there; during one, any usable CA does.
func rootCAs(ctx context.Context, r client.Reader, ns string, servers []string, trust string, handingOver bool) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	usable := false
	for _, name := range servers {
		server, err := secret(ctx, r, ns, name)
		switch {
		case err != nil && !handingOver:
			return nil, err
		case err == nil && pool.AppendCertsFromPEM(server.Data["ca.crt"]):
			usable = true
		}
	}
	if trust != "" {
		if s, err := secret(ctx, r, ns, trust); err == nil && pool.AppendCertsFromPEM(s.Data[manifest.KeyClientCA]) {
			usable = true
		}
	}
	if !usable {
		return nil, fmt.Errorf("secret %s has no usable ca.crt to verify etcd's server certificate", strings.Join(servers, ", "))
	}
	return pool, nil
}

// clientCertificates loads the client certificates of the named Secrets
// ("" names none). During a hand-over one of them is enough.
func clientCertificates(ctx context.Context, r client.Reader, ns string, names []string, handingOver bool) ([]tls.Certificate, error) {
	var out []tls.Certificate
	var errs []error
	for _, name := range names {
		if name == "" {
			continue
		}
		s, err := secret(ctx, r, ns, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cert, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			errs = append(errs, fmt.Errorf("secret %s: bad client certificate: %w", name, err))
			continue
		}
		out = append(out, cert)
	}
	if len(errs) > 0 && (len(out) == 0 || !handingOver) {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// mountedServerSecrets lists the client-plane server Secrets the members
// mount, and the trust Secret of a hand-over one of them mounts.
func mountedServerSecrets(members []*v1alpha2.EtcdMember) (servers []string, trust string) {
	for _, m := range members {
		t := m.Spec.TLS
		if t == nil || t.ClientServerSecretRef == nil {
			continue
		}
		if !slices.Contains(servers, t.ClientServerSecretRef.Name) {
			servers = append(servers, t.ClientServerSecretRef.Name)
		}
		if t.TrustedCASecretRef != nil {
			trust = t.TrustedCASecretRef.Name
		}
	}
	return servers, trust
}

// SecretNames are the Secrets of the cluster's namespace that Config and
// the root password's management read.
func SecretNames(c *v1alpha2.EtcdCluster) []string {
	var out []string
	if name := OperatorClientSecret(c); name != "" {
		out = append(out, name)
	}
	if prev := c.Status.OperatorClientSecret; prev != "" && !slices.Contains(out, prev) {
		out = append(out, prev)
	}
	if manifest.AuthWanted(c) {
		out = append(out, manifest.AppliedPasswordSecretName(c.Name))
		if ref := c.Spec.Auth.RootCredentialsSecretRef; ref.Name != "" {
			out = append(out, ref.Name)
		}
	}
	return out
}

// OperatorClientSecret is the Secret of the client certificate the
// operator presents, as the spec names it ("" without one).
func OperatorClientSecret(c *v1alpha2.EtcdCluster) string {
	if c.Spec.TLS == nil || c.Spec.TLS.Client == nil {
		return ""
	}
	t := c.Spec.TLS.Client
	switch {
	case t.OperatorClientSecretRef != nil:
		return t.OperatorClientSecretRef.Name
	case t.CertManager != nil && t.CertManager.OperatorClientIssuerRef != nil:
		return manifest.OperatorClientTLSSecretName(c.Name)
	}
	return ""
}

func secret(ctx context.Context, r client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("reading TLS secret %s: %w", name, err)
	}
	return s, nil
}
