package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Authentication: once the cluster has converged, the operator creates etcd's
// root user with the password of the user's basic-auth Secret, turns
// authentication on and latches status.authEnabled; from then on every dial
// logs in as root. The password etcd has is recorded in the operator's own
// Secret (manifest.AppliedPasswordSecretName) before it is set, so a changed
// user Secret is applied by logging in with the recorded one, and a crash at
// any point leaves a password that works: between enabling and latching,
// etcd's AuthStatus says it is on; between changing the password and
// recording it, the new one works.

// retryAuth is how soon a refused or failed authentication step is tried
// again: Secrets are not watched.
const retryAuth = 10 * time.Second

// authLatch runs before etcd is read: it latches authentication that etcd
// already has on, and brings etcd's root password to the user's Secret.
func (r *Reconciler) authLatch(ctx context.Context, w *world) (*ctrl.Result, error) {
	c := w.cluster
	if !manifest.AuthWanted(c) || c.Status.ClusterID == "" || len(w.endpoints()) == 0 {
		return nil, nil
	}
	if c.Status.AuthEnabled {
		return r.syncPassword(ctx, w)
	}
	var on bool
	err := r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		var err error
		on, err = cl.AuthEnabled(ctx)
		return err
	})
	if err == nil && on {
		// Enabled by a pass that stopped before it latched (or by hand).
		// Latched only with a password to log in with: every dial uses it.
		if _, err := etcdconn.AppliedPassword(ctx, r.APIReader, c); err != nil {
			w.authProblem = &progress{conditions.ReasonAuthCredentialsRejected,
				"etcd has authentication on, and the operator has no root password to log in with: " + err.Error()}
			r.warnOnce(w, w.authProblem.reason, "EnableAuth", w.authProblem.message)
			return nil, nil
		}
		c.Status.AuthEnabled = true
		r.event(c, false, conditions.ReasonAuthEnabled, "EnableAuth", "etcd already checks credentials: authentication latched")
	}
	// Unreachable: reading etcd reports it.
	return nil, nil
}

// enableAuth turns authentication on once the cluster reached its target.
func (r *Reconciler) enableAuth(ctx context.Context, w *world) (*ctrl.Result, error) {
	c := w.cluster
	if !manifest.AuthWanted(c) || c.Status.AuthEnabled || c.Status.ClusterID == "" || w.desired() == 0 || !targetReached(w) {
		return nil, nil
	}
	wanted, err := etcdconn.WantedPassword(ctx, r.APIReader, c)
	if err != nil {
		msg := "Authentication is not enabled yet: " + err.Error()
		w.working(conditions.ReasonEnablingAuth, msg)
		r.warnOnce(w, conditions.ReasonEnablingAuth, "EnableAuth", msg)
		return stop(retryAuth), nil
	}
	if err := r.recordPassword(ctx, w, wanted); err != nil {
		return nil, err
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		if on, err := cl.AuthEnabled(ctx); err != nil || on {
			return err
		}
		return cl.EnableRootAuth(ctx, wanted)
	})
	r.Metrics.MembershipOp(c, "auth-enable", err)
	if err != nil {
		w.working(conditions.ReasonEnablingAuth, "Enabling authentication failed, retrying: "+err.Error())
		logf(ctx, w)("Enabling authentication failed", "error", err.Error())
		return stop(retryAuth), nil
	}
	c.Status.AuthEnabled = true
	r.event(c, false, conditions.ReasonAuthEnabled, "EnableAuth", "Authentication enabled: etcd's root user has the password of Secret %s", c.Spec.Auth.RootCredentialsSecretRef.Name)
	logf(ctx, w)("Authentication enabled")
	return nil, nil
}

// syncPassword applies a changed password of the user's Secret to etcd,
// logged in with the recorded one, then records it.
func (r *Reconciler) syncPassword(ctx context.Context, w *world) (*ctrl.Result, error) {
	c := w.cluster
	wanted, err := etcdconn.WantedPassword(ctx, r.APIReader, c)
	if err != nil {
		// The recorded password still works; say what is wrong.
		r.warnOnce(w, conditions.ReasonAuthCredentialsRejected, "ChangePassword", "Cannot read the root password to apply: "+err.Error())
		return nil, nil
	}
	applied, err := etcdconn.AppliedPassword(ctx, r.APIReader, c)
	if err != nil {
		return nil, err
	}
	if applied == wanted {
		return nil, nil
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error { return cl.ChangeRootPassword(ctx, wanted) })
	switch {
	case errors.Is(err, etcd.ErrAuthFailed) && r.passwordWorks(ctx, w, wanted):
		// Changed by a pass that stopped before recording it.
	case errors.Is(err, etcd.ErrAuthFailed):
		w.authProblem = &progress{conditions.ReasonAuthCredentialsRejected, fmt.Sprintf(
			"etcd accepts neither the root password the operator applied last (Secret %s) nor the one in Secret %s: "+
				"put the password etcd has into Secret %s", manifest.AppliedPasswordSecretName(c.Name), c.Spec.Auth.RootCredentialsSecretRef.Name,
			c.Spec.Auth.RootCredentialsSecretRef.Name)}
		r.warnOnce(w, conditions.ReasonAuthCredentialsRejected, "ChangePassword", w.authProblem.message)
		return done(), nil
	case err != nil:
		logf(ctx, w)("Changing the root password failed", "error", err.Error())
		return stop(retryAuth), nil
	}
	if err := r.recordPassword(ctx, w, wanted); err != nil {
		return nil, err
	}
	r.event(c, false, conditions.ReasonAuthEnabled, "ChangePassword", "Applied the root password of Secret %s to etcd", c.Spec.Auth.RootCredentialsSecretRef.Name)
	return nil, nil
}

// passwordWorks reports whether etcd accepts root with this password.
func (r *Reconciler) passwordWorks(ctx context.Context, w *world, password string) bool {
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, w.cluster, w.endpoints())
	if err != nil {
		return false
	}
	cfg.Username, cfg.Password = manifest.RootUser, password
	cl, err := r.Dial(ctx, cfg)
	if err != nil {
		return false
	}
	defer func() { _ = cl.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cl.MemberList(rctx)
	return err == nil
}

// recordPassword writes the password etcd has (or is about to have) into
// the operator's Secret.
func (r *Reconciler) recordPassword(ctx context.Context, w *world, password string) error {
	want := manifest.AppliedPasswordSecret(w.cluster, []byte(password))
	have := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("recording the root password: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the recorded root password: %w", err)
	case string(have.Data[manifest.KeyPassword]) == password:
		return nil
	}
	have.Data = want.Data
	if err := r.Client.Update(ctx, have); err != nil {
		return fmt.Errorf("recording the root password: %w", err)
	}
	return nil
}
