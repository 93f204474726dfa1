package snapshot

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

func jobKey(s *v1alpha2.EtcdSnapshot) client.ObjectKey {
	return client.ObjectKey{Namespace: s.Namespace, Name: manifest.SnapshotJobName(s.Name)}
}

// start checks that the snapshot can be taken at all and creates its Job.
func (r *Reconciler) start(ctx context.Context, p *pass) (ctrl.Result, error) {
	s := p.snap
	c := &v1alpha2.EtcdCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.ClusterRef.Name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.fail(p, conditions.ReasonClusterNotFound, fmt.Sprintf("EtcdCluster %s does not exist in namespace %s", s.Spec.ClusterRef.Name, s.Namespace))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading cluster: %w", err)
	}
	if wait, ok := r.waitForCluster(p, c); !ok {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if reason, msg, err := r.preflight(ctx, s); err != nil || reason != "" {
		if reason != "" {
			r.fail(p, reason, msg)
		}
		return ctrl.Result{}, err
	}
	schedule, err := r.schedule(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	job := manifest.SnapshotJob(s, c, schedule, r.OperatorImage)
	if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating the snapshot Job: %w", err)
	}
	s.Status.Phase = v1alpha2.SnapshotStarted
	s.Status.StartTime = &metav1.Time{Time: p.now}
	p.ready(false, conditions.ReasonJobCreated, fmt.Sprintf("Job %s streams the snapshot of %s", job.Name, c.Name))
	conditions.Record(r.Recorder, s, false, conditions.ReasonJobCreated, "Snapshot", "Created Job %s to snapshot cluster %s", job.Name, c.Name)
	logger(ctx, s)("Created the snapshot Job", "job", job.Name)
	return ctrl.Result{}, nil
}

// waitForCluster holds a snapshot of a cluster that has not formed yet (or
// has not turned the auth it asks for on): there is nothing to snapshot,
// and the agent could not log in. It gives up after a while; ok is true
// when the snapshot can start.
func (r *Reconciler) waitForCluster(p *pass, c *v1alpha2.EtcdCluster) (time.Duration, bool) {
	reason, timeout, msg := "", "", ""
	switch {
	case c.Status.ClusterID == "":
		reason, timeout = conditions.ReasonClusterNotFormed, "has not formed"
		msg = fmt.Sprintf("Waiting for cluster %s to form", c.Name)
	case c.Spec.Auth != nil && c.Spec.Auth.Enabled && !c.Status.AuthEnabled:
		reason, timeout = conditions.ReasonAuthLatchTimeout, "has not turned etcd authentication on"
		msg = fmt.Sprintf("Waiting for cluster %s to turn etcd authentication on", c.Name)
	case conditions.IsTrue(c.Status.Conditions, conditions.TLSHandover):
		// The agent trusts the material spec.tls names, which members
		// serve only once they moved.
		reason, timeout = conditions.ReasonTLSHandoverTimeout, "has not completed its TLS hand-over"
		msg = fmt.Sprintf("Waiting for cluster %s to complete its TLS hand-over", c.Name)
	default:
		return 0, true
	}
	left := p.snap.CreationTimestamp.Add(waitForCluster).Sub(p.now)
	if left <= 0 {
		r.fail(p, reason, fmt.Sprintf("Cluster %s %s within %s; create a new EtcdSnapshot once it has", c.Name, timeout, waitForCluster))
		return 0, false
	}
	p.ready(false, conditions.ReasonWaitingForCluster, msg)
	// The cluster's changes bring us back; the timer is the deadline.
	return left, false
}

// preflightS3 checks the Secrets an S3 location names: the credentials (when
// named; else the agent's credential chain finds them) and the CA bundle.
func (r *Reconciler) preflightS3(ctx context.Context, ns string, s3 *v1alpha2.S3Location) (string, string, error) {
	if name := s3.CredentialsSecretRef.Name; name != "" {
		sec := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			return conditions.ReasonCredentialsSecretNotFound, fmt.Sprintf(
				"Secret %s with the S3 credentials does not exist: create it with keys %s and %s, then create the snapshot again",
				name, agentenv.EnvAccessKey, agentenv.EnvSecretKey), nil
		case err != nil:
			return "", "", fmt.Errorf("reading the credentials Secret: %w", err)
		}
		for _, key := range []string{agentenv.EnvAccessKey, agentenv.EnvSecretKey} {
			if len(sec.Data[key]) == 0 {
				return conditions.ReasonCredentialsSecretInvalid, fmt.Sprintf(
					"Secret %s has no key %s: it needs %s and %s", sec.Name, key, agentenv.EnvAccessKey, agentenv.EnvSecretKey), nil
			}
		}
	}
	if ca := s3.CASecretRef; ca != nil && ca.Name != "" {
		sec := &corev1.Secret{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ca.Name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			return conditions.ReasonInvalidDestination, fmt.Sprintf(
				"Secret %s with the S3 endpoint's CA (s3.caSecretRef) does not exist: create it with key ca.crt, then create the snapshot again", ca.Name), nil
		case err != nil:
			return "", "", fmt.Errorf("reading the CA Secret: %w", err)
		case len(sec.Data["ca.crt"]) == 0:
			return conditions.ReasonInvalidDestination, fmt.Sprintf("Secret %s has no key ca.crt: it holds the PEM certificate of the S3 endpoint's CA", ca.Name), nil
		}
	}
	if sse := s3.SSE; sse != nil && sse.CustomerKeySecretRef != nil {
		return r.preflightCustomerKey(ctx, ns, sse.CustomerKeySecretRef.Name)
	}
	return "", "", nil
}

// preflightCustomerKey checks the Secret with the key of server-side
// encryption type Customer: the agent's Pod would wait for a missing one
// forever, and the store would refuse a key of the wrong size.
func (r *Reconciler) preflightCustomerKey(ctx context.Context, ns, name string) (string, string, error) {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return conditions.ReasonInvalidDestination, fmt.Sprintf(
			"Secret %s with the customer key of the server-side encryption (s3.sse.customerKeySecretRef) does not exist: create it with key %s "+
				"(32 bytes, base64-encoded), then create the snapshot again", name, v1alpha2.SSECustomerKeyKey), nil
	case err != nil:
		return "", "", fmt.Errorf("reading the customer key Secret: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sec.Data[v1alpha2.SSECustomerKeyKey])))
	if err != nil || len(key) != 32 {
		return conditions.ReasonInvalidDestination, fmt.Sprintf(
			"Secret %s's key %s must hold the customer key of the server-side encryption: 32 bytes, base64-encoded (head -c 32 /dev/urandom | base64)",
			name, v1alpha2.SSECustomerKeyKey), nil
	}
	return "", "", nil
}

// preflight catches what would leave the Job's Pod waiting forever instead
// of failing: a missing credentials Secret or claim. It returns a failure
// reason and message, or an error to retry on.
func (r *Reconciler) preflight(ctx context.Context, s *v1alpha2.EtcdSnapshot) (string, string, error) {
	if s3 := s.Spec.Destination.S3; s3 != nil {
		if reason, msg, err := r.preflightS3(ctx, s.Namespace, s3); reason != "" || err != nil {
			return reason, msg, err
		}
	}
	if pvc := s.Spec.Destination.PVC; pvc != nil {
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: pvc.ClaimName}, &corev1.PersistentVolumeClaim{})
		switch {
		case apierrors.IsNotFound(err):
			return conditions.ReasonPVCNotFound, fmt.Sprintf(
				"PersistentVolumeClaim %s does not exist in namespace %s: create it, then create the snapshot again", pvc.ClaimName, s.Namespace), nil
		case err != nil:
			return "", "", fmt.Errorf("reading the destination claim: %w", err)
		}
	}
	return "", "", nil
}

// schedule returns the schedule that made the snapshot, whose retention
// the agent applies, or nil.
func (r *Reconciler) schedule(ctx context.Context, s *v1alpha2.EtcdSnapshot) (*v1alpha2.EtcdSnapshotSchedule, error) {
	ref := metav1.GetControllerOf(s)
	if ref == nil || ref.Kind != "EtcdSnapshotSchedule" || ref.APIVersion != v1alpha2.GroupVersion.String() {
		return nil, nil
	}
	sched := &v1alpha2.EtcdSnapshotSchedule{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ref.Name}, sched); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading schedule %s: %w", ref.Name, err)
	}
	if sched.UID != ref.UID {
		return nil, nil
	}
	return sched, nil
}
