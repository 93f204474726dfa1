package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The actions of bootstrap (bootstrap.go plans them): the seed member is
// made, then completed with the cluster it formed. See act.go for what
// every action promises.

// createMember creates a new member from the latched target (a joining one
// at a version the running cluster accepts) and records the expectation
// that the cache will show it. A seed is created with its initialCluster,
// so its Pod can start at once; with the join gate, a joiner is created with
// the membership it will join (its Pod starts at once, held by the gate).
func (r *Reconciler) createMember(ctx context.Context, w *world, seed bool) (*v1alpha2.EtcdMember, error) {
	m := manifest.NewMember(w.cluster, seed)
	if r.MemberName != nil {
		m.Name = r.MemberName(w.cluster.Name)
	}
	// The member controller's first step would add it; with it from the
	// start, that pass goes straight to the volume.
	controllerutil.AddFinalizer(m, manifest.MemberFinalizer)
	switch {
	case seed:
		m.Labels[manifest.LabelComponent] = m.Name
		m.Spec.InitialCluster = manifest.InitialCluster(map[string]string{m.Name: manifest.PeerURL(m)})
	case w.joinGate:
		metav1.SetMetaDataAnnotation(&m.ObjectMeta, manifest.AnnotationJoinCluster, joinClusterFor(w, m))
	}
	if !seed {
		m.Spec.Version = joinVersion(w)
		if t := joinTLS(w); t != nil {
			m.Spec.TLS = t
		}
	}
	if rec := w.cluster.Status.Recovery; seed && rec != nil && rec.Phase == v1alpha2.RecoveryRebootstrapping && rec.Restore != nil {
		// A cluster rebuilt from a snapshot (recover.go).
		m.Spec.Restore = rec.Restore.DeepCopy()
	}
	if err := r.Client.Create(ctx, m); err != nil {
		r.Metrics.MembershipOp(w.cluster, "create", err)
		return nil, fmt.Errorf("creating member: %w", err)
	}
	r.expect.created(client.ObjectKeyFromObject(w.cluster).String(), m.Name, w.now)
	r.Metrics.MembershipOp(w.cluster, "create", nil)
	what := "member"
	if seed {
		what = "seed member"
	}
	r.event(w.cluster, false, "MemberCreated", "CreateMember", "Created %s %s", what, m.Name)
	logf(ctx, w)("Created member", "member", m.Name, "seed", seed)
	return m, nil
}

// completeSeed records the seed as a voter and gives it its initialCluster.
func (r *Reconciler) completeSeed(ctx context.Context, seed *v1alpha2.EtcdMember, initial string) error {
	if !seed.Status.IsVoter {
		patch := client.MergeFrom(seed.DeepCopy())
		seed.Status.IsVoter = true
		if err := r.Client.Status().Patch(ctx, seed, patch); err != nil {
			return fmt.Errorf("recording seed %s as a voter: %w", seed.Name, err)
		}
	}
	if seed.Spec.InitialCluster == initial && seed.Labels[manifest.LabelComponent] == seed.Name {
		return nil
	}
	return r.setInitialCluster(ctx, seed, initial)
}
