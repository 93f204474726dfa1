package migrate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The legacy operator's root user has no password: it is created with
// etcd's NoPassword option and authenticates by the common name of the
// legacy operator's client certificate. The operator logs in as root with
// the password of a basic-auth Secret. etcd can neither give a password to
// such a user nor delete root while authentication is on, so the adoption
// switches authentication off for a moment, re-creates root with a
// password and switches it on again (etcd.GiveRootAPassword).

// RootCredentialsSecretName is the basic-auth Secret with the root password
// of an adopted cluster whose legacy spec had enableAuth. The tool creates it
// with a random password unless it exists (create it first to choose the
// password).
func RootCredentialsSecretName(cluster string) string { return cluster + "-root-credentials" }

// rootPassworder is the call that gives root a password (the real client
// has it; see etcd.GiveRootAPassword).
type rootPassworder interface {
	RootRoles(ctx context.Context) ([]string, error)
	GiveRootAPassword(ctx context.Context, password string, roles []string) error
}

// annotationRootRoles, on the operator's record of the password, keeps the
// roles root held besides root before the tool re-created it: a run killed
// after etcd deleted root finds them there.
const annotationRootRoles = "etcd-operator.cozystack.io/migrated-root-roles"

// readAuth checks what adopting a cluster with enableAuth needs: the
// legacy operator's certificate is root's (the tool acts as root through
// it), and a credentials Secret made beforehand holds a password.
func (lv *Live) readAuth(ctx context.Context, c client.Client) error {
	l := lv.Legacy
	if l.Spec.Security == nil || !l.Spec.Security.EnableAuth {
		return nil
	}
	switch m := lv.TLS; {
	case m == nil && l.tls() != (legacyTLS{}):
		// Its TLS Secrets are refused already.
	case m == nil || m.operatorCert == nil || m.operatorCert.Leaf == nil:
		lv.refuse("spec.security.enableAuth without a client certificate for the operator (spec.security.tls.clientSecret with clientTrustedCASecret): etcd-migrate acts as root through it to give root a password")
	case m.operatorCert.Leaf.Subject.CommonName != manifest.RootUser:
		lv.refuse("spec.security.enableAuth: the legacy operator's client certificate (Secret %s) is for user %q, not root: etcd-migrate acts as root through it to give root a password", m.spec.ClientSecret, m.operatorCert.Leaf.Subject.CommonName)
	}
	s := &corev1.Secret{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: l.Namespace(), Name: RootCredentialsSecretName(l.Name())}, s); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if len(s.Data[manifest.KeyPassword]) == 0 {
		lv.refuse("Secret %s exists without a password: delete it (etcd-migrate then makes one with a random password) or put the root password under key %s", s.Name, manifest.KeyPassword)
	}
	return nil
}

// auth gives etcd's root user the password of the credentials Secret: the
// Secret first (made with a random password unless it exists), then the
// operator's record of the password etcd has, then etcd. A re-run finds
// the password working and stops there.
func (a *applier) auth(ctx context.Context) error {
	l := a.plan.Live.Legacy
	if !manifest.AuthWanted(a.plan.Cluster) {
		return nil
	}
	password, err := a.rootPassword(ctx)
	if err != nil {
		return err
	}
	cluster := &v1alpha2.EtcdCluster{}
	if err := a.env.Client.Get(ctx, a.key(l.Name()), cluster); err != nil {
		return fmt.Errorf("reading EtcdCluster %s: %w", l.Name(), err)
	}
	pod := a.readyPod()
	if pod == nil {
		return errors.New("no Ready member to set the root password through")
	}
	lv := a.plan.Live
	roles, err := a.recordPassword(ctx, cluster, password, pod)
	if err != nil {
		return err
	}
	if lv.withEtcdAs(ctx, a.env, pod, manifest.RootUser, password, func(cl etcd.Maintenance) error {
		_, err := timed(ctx, 10*time.Second, cl.MemberList)
		return err
	}) == nil {
		a.logf("%s/%s: root logs in with the password of Secret %s already", l.Namespace(), l.Name(), RootCredentialsSecretName(l.Name()))
		return nil
	}
	err = lv.withEtcd(ctx, a.env, pod, func(cl etcd.Maintenance) error {
		rp, ok := cl.(rootPassworder)
		if !ok {
			return errors.New("this etcd client cannot set the root password")
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return rp.GiveRootAPassword(ctx, password, roles)
	})
	if err != nil {
		return fmt.Errorf("giving root the password of Secret %s: %w", RootCredentialsSecretName(l.Name()), err)
	}
	a.logf("%s/%s: root now logs in with the password of Secret %s (authentication was off for a moment)", l.Namespace(), l.Name(), RootCredentialsSecretName(l.Name()))
	return nil
}

// rootPassword reads the credentials Secret, creating it with a random
// password when it does not exist.
func (a *applier) rootPassword(ctx context.Context) (string, error) {
	name := RootCredentialsSecretName(a.plan.Live.Legacy.Name())
	s := &corev1.Secret{}
	err := a.env.Client.Get(ctx, a.key(name), s)
	switch {
	case err == nil:
		if p := s.Data[manifest.KeyPassword]; len(p) > 0 {
			return string(p), nil
		}
		return "", fmt.Errorf("the credentials Secret %s has no %s", name, manifest.KeyPassword)
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading Secret %s: %w", name, err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	password := base64.RawURLEncoding.EncodeToString(raw)
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.plan.Live.Legacy.Namespace()},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{corev1.BasicAuthUsernameKey: []byte(manifest.RootUser), corev1.BasicAuthPasswordKey: []byte(password)},
	}
	if err := a.env.Client.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return a.rootPassword(ctx)
		}
		return "", fmt.Errorf("creating Secret %s: %w", name, err)
	}
	a.logf("created Secret %s with a random root password", name)
	return password, nil
}

// recordPassword writes the operator's record of the password etcd has
// (manifest.AppliedPasswordSecret) before etcd has it, as the operator does:
// the operator latches authentication only with a password to log in with.
// The record also keeps the roles root holds (read from etcd the first
// time, before root is re-created), which it returns.
func (a *applier) recordPassword(ctx context.Context, c *v1alpha2.EtcdCluster, password string, pod *corev1.Pod) ([]string, error) {
	want := manifest.AppliedPasswordSecret(c, []byte(password))
	have := &corev1.Secret{}
	err := a.env.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	exists := err == nil
	recorded, ok := have.Annotations[annotationRootRoles]
	if !ok {
		var held []string
		err := a.plan.Live.withEtcd(ctx, a.env, pod, func(cl etcd.Maintenance) error {
			rp, ok := cl.(rootPassworder)
			if !ok {
				return errors.New("this etcd client cannot read root's roles")
			}
			var err error
			held, err = timed(ctx, 10*time.Second, rp.RootRoles)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reading the roles of etcd's root user: %w", err)
		}
		held = slices.DeleteFunc(slices.Clone(held), func(r string) bool { return r == manifest.RootUser })
		recorded = strings.Join(held, ",")
	}
	if exists && ok && string(have.Data[manifest.KeyPassword]) == password {
		return rolesOf(recorded), nil
	}
	if !exists {
		have = want
	}
	have.Data = want.Data
	metav1.SetMetaDataAnnotation(&have.ObjectMeta, annotationRootRoles, recorded)
	if exists {
		err = a.env.Client.Update(ctx, have)
	} else {
		err = a.env.Client.Create(ctx, have)
	}
	if err != nil {
		return nil, fmt.Errorf("recording the root password in Secret %s: %w", want.Name, err)
	}
	return rolesOf(recorded), nil
}

func rolesOf(recorded string) []string {
	if recorded == "" {
		return nil
	}
	return strings.Split(recorded, ",")
}

// readyPod is a member Pod that was Running and Ready when inspected.
func (a *applier) readyPod() *corev1.Pod {
	for _, m := range a.plan.Live.Members {
		if m.Pod != nil && podReady(m.Pod) {
			return m.Pod
		}
	}
	return nil
}
