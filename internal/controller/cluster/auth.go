package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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
// again (etcd refusing is not something a watch reports).
const retryAuth = 10 * time.Second

// syncAuth runs beside the planner: it learns that etcd already has
// authentication on (status.authEnabled is set from what it learned), and
// brings etcd's root password to the user's Secret. What goes wrong is
// reported; membership repair does not wait on it.
func (r *Reconciler) syncAuth(ctx context.Context, w *world) learned {
	c := w.cluster
	if !manifest.AuthWanted(c) || c.Status.ClusterID == "" || !w.etcd.asked {
		return learned{}
	}
	if c.Status.AuthEnabled {
		r.syncPassword(ctx, w)
		return learned{}
	}
	var on bool
	err := r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		var err error
		on, err = cl.AuthEnabled(ctx)
		return err
	})
	if err != nil || !on {
		return learned{}
	}
	// Enabled by a pass that stopped before it recorded it (or by hand).
	// Recorded only with a password to log in with: every dial uses it.
	if _, err := etcdconn.AppliedPassword(ctx, r.APIReader, c); err != nil {
		return learned{auth: &finding{conditions.ReasonAuthCredentialsRejected,
			"etcd has authentication on, and the operator has no root password to log in with: " + err.Error()}}
	}
	r.event(c, false, conditions.ReasonAuthEnabled, "EnableAuth", "etcd already checks credentials: authentication latched")
	return learned{authEnabled: true}
}

// enableAuth turns authentication on once the cluster reached its target.
func (pl *planner) enableAuth() bool {
	c := pl.w.cluster
	if !manifest.AuthWanted(c) || c.Status.AuthEnabled || c.Status.ClusterID == "" || pl.w.desired() == 0 || !targetReached(pl.w) {
		return false
	}
	pl.working(conditions.ReasonEnablingAuth, "Enabling etcd authentication")
	return pl.choose(&change{kind: enableAuth})
}

// turnOnAuth records the password etcd is about to have, then creates root
// and turns authentication on.
func (r *Reconciler) turnOnAuth(ctx context.Context, w *world) outcome {
	c := w.cluster
	wanted, err := etcdconn.WantedPassword(ctx, r.APIReader, c)
	if err != nil {
		return outcome{progress: &finding{conditions.ReasonEnablingAuth, "Authentication is not enabled yet: " + err.Error()}, warn: true, requeue: retryAuth}
	}
	if err := r.recordPassword(ctx, w, wanted); err != nil {
		return outcome{err: err}
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error {
		if on, err := cl.AuthEnabled(ctx); err != nil || on {
			return err
		}
		return cl.EnableRootAuth(ctx, wanted)
	})
	r.Metrics.MembershipOp(c, "auth-enable", err)
	if err != nil {
		logf(ctx, w)("Enabling authentication failed", "error", err.Error())
		return outcome{progress: &finding{conditions.ReasonEnablingAuth, "Enabling authentication failed, retrying: " + err.Error()}, requeue: retryAuth}
	}
	r.event(c, false, conditions.ReasonAuthEnabled, "EnableAuth", "Authentication enabled: etcd's root user has the password of Secret %s", c.Spec.Auth.RootCredentialsSecretRef.Name)
	logf(ctx, w)("Authentication enabled")
	return outcome{learned: learned{authEnabled: true}}
}

// syncPassword applies a changed password of the user's Secret to etcd,
// logged in with the recorded one, then records it.
func (r *Reconciler) syncPassword(ctx context.Context, w *world) {
	c := w.cluster
	wanted, err := etcdconn.WantedPassword(ctx, r.APIReader, c)
	if err != nil {
		// The recorded password still works; say what is wrong.
		r.warnOnce(w, conditions.ReasonAuthCredentialsRejected, "ChangePassword", "Cannot read the root password to apply: "+err.Error())
		return
	}
	applied, err := etcdconn.AppliedPassword(ctx, r.APIReader, c)
	if err != nil {
		w.features.failed = append(w.features.failed, "reading the applied root password: "+err.Error())
		return
	}
	if applied == wanted {
		return
	}
	err = r.withClient(ctx, w, nil, func(ctx context.Context, cl etcd.Client) error { return cl.ChangeRootPassword(ctx, wanted) })
	switch {
	case errors.Is(err, etcd.ErrAuthFailed) && r.passwordWorks(ctx, w, wanted):
		// Changed by a pass that stopped before recording it.
	case errors.Is(err, etcd.ErrAuthFailed):
		w.features.auth = &finding{conditions.ReasonAuthCredentialsRejected, fmt.Sprintf(
			"etcd accepts neither the root password the operator applied last (Secret %s) nor the one in Secret %s: "+
				"put the password etcd has into Secret %s", manifest.AppliedPasswordSecretName(c.Name), c.Spec.Auth.RootCredentialsSecretRef.Name,
			c.Spec.Auth.RootCredentialsSecretRef.Name)}
		return
	case err != nil:
		logf(ctx, w)("Changing the root password failed", "error", err.Error())
		w.features.failed = append(w.features.failed, "changing the root password: "+err.Error())
		return
	}
	if err := r.recordPassword(ctx, w, wanted); err != nil {
		w.features.failed = append(w.features.failed, err.Error())
		return
	}
	r.event(c, false, conditions.ReasonAuthEnabled, "ChangePassword", "Applied the root password of Secret %s to etcd", c.Spec.Auth.RootCredentialsSecretRef.Name)
}

// passwordWorks reports whether etcd accepts root with this password.
func (r *Reconciler) passwordWorks(ctx context.Context, w *world, password string) bool {
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, w.cluster, w.inEtcd())
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
		r.wrote(want)
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
	r.wrote(have)
	return nil
}

// wrote tells the Secret reader that the operator changed a Secret, so that
// the next read does not return what it kept before while the watch has
// not seen the change yet.
func (r *Reconciler) wrote(s *corev1.Secret) {
	if f, ok := r.APIReader.(interface{ Forget(types.NamespacedName) }); ok {
		f.Forget(client.ObjectKeyFromObject(s))
	}
}
