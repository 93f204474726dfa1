package defrag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/etcdhealth"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// pass is the world one reconcile decides from: the run, its cluster, the
// cluster's running members, and etcd's own report of each, read fresh.
type pass struct {
	run      *v1alpha2.EtcdDefrag
	original *v1alpha2.EtcdDefrag
	now      time.Time
	cluster  *v1alpha2.EtcdCluster
	// members run (not being deleted, not dormant), by name.
	members []*v1alpha2.EtcdMember
	client  etcd.Client
	dialErr error
	// status and statusErr are each member's Status answer, by name;
	// leader is the leader's own report.
	status    map[string]*etcd.Status
	statusErr map[string]error
	leader    *etcd.Status
}

func (p *pass) close() {
	if p.client != nil {
		_ = p.client.Close()
		p.client = nil
	}
}

// member returns the running member of that name, or nil.
func (p *pass) member(name string) *v1alpha2.EtcdMember {
	for _, m := range p.members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// observe lists the cluster's running members (by the UID in their
// controller reference, never by labels) and asks each etcd about itself.
// What etcd does not answer is recorded, not an error.
func (r *Reconciler) observe(ctx context.Context, p *pass) error {
	list := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, list, client.InNamespace(p.cluster.Namespace), index.ByController(string(p.cluster.UID))); err != nil {
		return fmt.Errorf("listing the cluster's members: %w", err)
	}
	for i := range list.Items {
		if m := &list.Items[i]; m.DeletionTimestamp == nil && !m.Spec.Dormant {
			p.members = append(p.members, m)
		}
	}
	slices.SortFunc(p.members, func(a, b *v1alpha2.EtcdMember) int { return strings.Compare(a.Name, b.Name) })
	p.status, p.statusErr = map[string]*etcd.Status{}, map[string]error{}
	if len(p.members) == 0 {
		return nil
	}
	p.client, p.dialErr = r.dial(ctx, p.cluster, p.members)
	if p.dialErr != nil {
		return nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range p.members {
		wg.Go(func() {
			st, err := memberStatus(ctx, p.client, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				p.statusErr[m.Name] = err
				return
			}
			p.status[m.Name] = st
		})
	}
	wg.Wait()
	p.leader = etcdhealth.LeaderOf(p.status)
	return nil
}

func memberStatus(ctx context.Context, c etcd.Client, m *v1alpha2.EtcdMember) (*etcd.Status, error) {
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	return c.Status(sctx, manifest.ClientURL(m))
}

// dial connects to the given members of the cluster, with its TLS and
// credentials.
func (r *Reconciler) dial(ctx context.Context, c *v1alpha2.EtcdCluster, via []*v1alpha2.EtcdMember) (etcd.Client, error) {
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, c, via)
	if err != nil {
		return nil, err
	}
	return r.Dial(ctx, cfg)
}

// busy says why the cluster is not at rest, or "": a run never works while
// the cluster controller changes the membership, rolls members out,
// bootstraps, pauses or is behind its spec, because a defragmentation
// blocks a member as a restart would, and the two would count on the same
// quorum. It reads the cluster controller's own report (its Progressing
// condition, at the cluster's current generation).
func busy(c *v1alpha2.EtcdCluster) string {
	if c.DeletionTimestamp != nil {
		return fmt.Sprintf("EtcdCluster %s is being deleted", c.Name)
	}
	if c.Status.Observed == nil {
		return fmt.Sprintf("EtcdCluster %s has not formed yet", c.Name)
	}
	cond := conditions.Get(c.Status.Conditions, conditions.Progressing)
	switch {
	case cond == nil:
		return fmt.Sprintf("EtcdCluster %s has not reported its progress yet", c.Name)
	case cond.ObservedGeneration != c.Generation:
		return fmt.Sprintf("EtcdCluster %s has not acted on its spec of generation %d yet", c.Name, c.Generation)
	case cond.Reason != conditions.ReasonReconciled:
		return fmt.Sprintf("EtcdCluster %s is not at rest (Progressing=%s, %s: %s)", c.Name, cond.Status, cond.Reason, cond.Message)
	}
	return ""
}

// unhealthy says why etcd's own view fails the health gate, or "": the
// members the cluster wants all run and answer, every one follows the
// leader in its term with its applied index close to the leader's
// (etcdhealth.Judge, the cluster controller's rule), none is a learner, and
// none reports a problem but a NOSPACE alarm (which a defragmentation
// helps).
func (p *pass) unhealthy() string {
	want := int(p.cluster.Status.Observed.Replicas)
	switch {
	case want == 0:
		return fmt.Sprintf("EtcdCluster %s wants no member running", p.cluster.Name)
	case len(p.members) != want:
		return fmt.Sprintf("%d members run, EtcdCluster %s wants %d", len(p.members), p.cluster.Name, want)
	case p.dialErr != nil:
		return "etcd cannot be reached: " + p.dialErr.Error()
	}
	for _, m := range p.members {
		st := p.status[m.Name]
		if st == nil {
			return fmt.Sprintf("member %s does not answer: %v", m.Name, p.statusErr[m.Name])
		}
		if ok, why := etcdhealth.Judge(st, p.leader); !ok {
			return fmt.Sprintf("member %s is not healthy: %s", m.Name, why)
		}
		if st.IsLearner {
			return fmt.Sprintf("member %s is a learner", m.Name)
		}
		for _, e := range st.Errors {
			if !strings.Contains(e, "alarm:"+etcd.AlarmNoSpace) {
				return fmt.Sprintf("member %s reports %q", m.Name, strings.TrimSpace(e))
			}
		}
	}
	return ""
}
