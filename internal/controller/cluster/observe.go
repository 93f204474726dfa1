package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdconn"
	"github.com/seed74754924/etcd-operator/internal/etcdhealth"
	"github.com/seed74754924/etcd-operator/internal/index"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/version"
)

// Timeouts of the etcd calls a pass makes to observe.
const (
	// statusTimeout bounds one member's Status call: a member that takes
	// longer is not healthy enough to count.
	statusTimeout = 2 * time.Second
	// listTimeout bounds reading the membership through the leader.
	listTimeout = 5 * time.Second
	// healthTimeout bounds asking /health of a member whose Status call
	// failed.
	healthTimeout = time.Second
)

// observe gathers the world a pass decides from: the members the cluster
// controls (by the UID in their controller reference: labels can be edited,
// and members of an earlier cluster of the same name are not ours), their
// Pods, the Secrets they mount, the headless endpoints, and etcd's own
// view, read fresh.
func (r *Reconciler) observe(ctx context.Context, c *v1alpha2.EtcdCluster) (*world, error) {
	list := &v1alpha2.EtcdMemberList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), index.ByController(string(c.UID))); err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	w := &world{cluster: c, original: c.DeepCopy(), now: r.Clock.Now(), pods: map[string]*corev1.Pod{}, joinGate: r.OperatorImage != ""}
	w.removed = r.expect.removedSet(w.now)
	for i := range list.Items {
		m := &list.Items[i]
		w.members = append(w.members, m)
		pod := &corev1.Pod{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, pod); err == nil {
			w.pods[m.Name] = pod
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: manifest.PVCName(m.Name)}, pvc); err == nil && pvc.DeletionTimestamp != nil {
			if w.claimsGoing == nil {
				w.claimsGoing = map[string]bool{}
			}
			w.claimsGoing[m.Name] = true
		}
	}
	// The cache lists in no set order; a pass decides from the members in
	// the order they were created (then by name), so that two passes over
	// the same members choose alike (which member goes first, the order a
	// recovery plan lists, and so its token).
	slices.SortStableFunc(w.members, func(a, b *v1alpha2.EtcdMember) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if err := r.readSecrets(ctx, w); err != nil {
		return nil, err
	}
	if err := r.readEndpoints(ctx, w); err != nil {
		return nil, err
	}
	r.readEtcd(ctx, w)
	r.readNodes(ctx, w)
	r.readRecoverySnapshot(ctx, w)
	r.readSnapshotBefore(ctx, w)
	r.readDefrags(ctx, w)
	return w, nil
}

// readRecoverySnapshot reads the EtcdSnapshot a recovery request names.
func (r *Reconciler) readRecoverySnapshot(ctx context.Context, w *world) {
	name := w.cluster.Annotations[manifest.AnnotationRecoverFromSnapshot]
	if name == "" || w.cluster.Annotations[manifest.AnnotationRecover] == "" {
		return
	}
	s := &v1alpha2.EtcdSnapshot{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: w.cluster.Namespace, Name: name}, s)
	switch {
	case err == nil:
		w.recoverySnapshot = s
	case !apierrors.IsNotFound(err):
		w.recoverySnapshotErr = err
	}
}

// readSecrets reads the Secrets the running members mount (through package
// secretcache: from the API server only when they changed). A missing
// Secret or key is recorded, not an error: the members report it, and a
// roll-out holds.
func (r *Reconciler) readSecrets(ctx context.Context, w *world) error {
	if w.secrets == nil {
		w.secrets = map[string]*corev1.Secret{}
	}
	for _, m := range w.running() {
		for _, u := range manifest.MountedSecrets(m) {
			sec, ok := w.secrets[u.Name]
			if !ok {
				var err error
				if sec, err = r.readSecret(ctx, m.Namespace, u.Name); err != nil {
					return err
				}
				w.secrets[u.Name] = sec
			}
			if w.secretProblem == "" {
				w.secretProblem = secretProblem(u, sec)
			}
		}
	}
	if w.secretProblem == "" {
		w.secretProblem = peerIdentityProblem(w)
	}
	for name, sec := range w.secrets {
		if sec == nil {
			delete(w.secrets, name)
		}
	}
	return nil
}

// readSecret reads one Secret, nil when it does not exist.
func (r *Reconciler) readSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return sec, nil
}

// secretProblem says what a member would miss in a Secret it mounts, or "".
func secretProblem(u manifest.SecretUse, sec *corev1.Secret) string {
	switch {
	case sec == nil:
		return fmt.Sprintf("Secret %s (the %s) does not exist", u.Name, u.Purpose)
	case u.MissingKey(sec) != "":
		return fmt.Sprintf("Secret %s (the %s) has no key %s", u.Name, u.Purpose, u.MissingKey(sec))
	}
	return ""
}

// peerIdentityProblem checks the peer certificate against the identity the
// members are to require of their peers, before a roll-out restarts one of
// them with it: a member that refused its peers would be cut off.
func peerIdentityProblem(w *world) string {
	target := manifest.MemberTLSOf(w.cluster)
	if target == nil || target.PeerSecretRef == nil {
		return ""
	}
	u := manifest.PeerSecretUse(target)
	sec := w.secrets[u.Name]
	if sec == nil {
		return ""
	}
	if why := u.Mismatch(sec); why != "" {
		return fmt.Sprintf("Secret %s (the %s): %s", u.Name, u.Purpose, why)
	}
	return ""
}

// readEndpoints records the Pod addresses the cluster's headless
// EndpointSlices list (from the cache; they are watched).
func (r *Reconciler) readEndpoints(ctx context.Context, w *world) error {
	if len(w.pending()) == 0 {
		return nil
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(w.cluster.Namespace), client.MatchingLabels{manifest.LabelCluster: w.cluster.Name}); err != nil {
		return fmt.Errorf("listing EndpointSlices: %w", err)
	}
	w.published = map[string]map[string]bool{}
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if w.published[svc] == nil {
			w.published[svc] = map[string]bool{}
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				w.published[svc][a] = true
			}
		}
	}
	return nil
}

// readEtcd asks every member whose etcd may run about itself, at once, then
// reads the membership through the leader, and, while a version change is
// under way, the cluster version. What cannot be read is recorded, never an
// error: the planner decides what an unknown means (nothing disruptive).
func (r *Reconciler) readEtcd(ctx context.Context, w *world) {
	asked := w.inEtcd()
	if len(asked) == 0 {
		return
	}
	w.etcd.asked = true
	w.etcd.status, w.etcd.statusErr, w.etcd.health = map[string]*etcd.Status{}, map[string]error{}, map[string]error{}
	c, err := r.dial(ctx, w, asked)
	if err != nil {
		w.etcd.err = err
		for _, m := range asked {
			w.etcd.statusErr[m.Name] = err
		}
		return
	}
	defer func() { _ = c.Close() }()
	r.readStatuses(ctx, w, c, asked)
	w.seen = withRecorded(r.seen.record(w), w.cluster.Status.LastReports)
	w.etcd.leader = etcdhealth.LeaderOf(w.etcd.status)
	if err := silence(w.etcd.status, w.etcd.statusErr); err != nil {
		// Not one member answered: a membership read would wait for its
		// whole timeout too, holding a worker other clusters need.
		w.etcd.err = err
		return
	}
	if leaderless(w.etcd.status) {
		// Every member that answered says there is no leader: etcd's
		// membership read (linearizable) would only time out.
		w.etcd.err = errNoLeader
		return
	}
	r.readMembership(ctx, w, asked)
	if w.etcd.list != nil && needsClusterVersion(w) {
		r.readClusterVersion(ctx, w, c)
	}
}

// silence is why no member answered its status call, when none did and
// none refused it (a member that refuses says why, for instance that it
// wants credentials, and the membership read says it again); nil otherwise.
func silence(status map[string]*etcd.Status, statusErr map[string]error) error {
	if len(status) > 0 || len(statusErr) == 0 {
		return nil
	}
	for _, err := range statusErr {
		if !etcd.Silent(err) {
			return nil
		}
	}
	// The first member's, by name: the message stays the same from pass
	// to pass, and so does the status that carries it.
	first := slices.Min(slices.Collect(maps.Keys(statusErr)))
	return fmt.Errorf("no member answered its status call (%s: %w)", first, statusErr[first])
}

// errNoLeader: the members that answer know no leader.
var errNoLeader = errors.New("no member that answers knows a leader")

// leaderless reports whether some members answered and none of them knows
// a leader.
func leaderless(status map[string]*etcd.Status) bool {
	for _, st := range status {
		if st.Leader != 0 {
			return false
		}
	}
	return len(status) > 0
}

// readStatuses asks each member about itself, in parallel. A member that
// does not answer and may be starting (health.go) is asked its /health too:
// a member that joined has a Ready Pod several seconds before its client
// port serves (etcd serves clients only once the member has published
// itself through raft, and a learner that caught up from the leader's
// snapshot retries that only after its request timeout).
func (r *Reconciler) readStatuses(ctx context.Context, w *world, c etcd.Client, asked []*v1alpha2.EtcdMember) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range asked {
		probe := w.mayBeStarting(m)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			st, err := c.Status(sctx, manifest.ClientURL(m))
			cancel()
			var herr error
			if err != nil && probe {
				hctx, cancel := context.WithTimeout(ctx, healthTimeout)
				herr = c.Health(hctx, manifest.HealthURL(m))
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				w.etcd.statusErr[m.Name] = err
				if probe {
					w.etcd.health[m.Name] = herr
				}
				return
			}
			w.etcd.status[m.Name] = st
		})
	}
	wg.Wait()
}

// readMembership reads etcd's membership through the leader, which always
// reaches a quorum; without a known leader, through every member asked (a
// member cut off answers nothing within the timeout).
func (r *Reconciler) readMembership(ctx context.Context, w *world, asked []*v1alpha2.EtcdMember) {
	var via []*v1alpha2.EtcdMember
	var unreachable error
	for _, m := range asked {
		if err := w.etcd.statusErr[m.Name]; etcd.Unreachable(err) {
			// Nothing serves there: clientv3 would wait for a connection
			// to it until the call's deadline.
			unreachable = err
			continue
		}
		via = append(via, m)
		if st := w.etcd.status[m.Name]; st != nil && w.etcd.leader != nil && st.MemberID == w.etcd.leader.MemberID {
			via = []*v1alpha2.EtcdMember{m}
			break
		}
	}
	if len(via) == 0 {
		w.etcd.err = fmt.Errorf("no member to read the membership from: %w", unreachable)
		return
	}
	c, err := r.dial(ctx, w, via)
	if err != nil {
		w.etcd.err = err
		return
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	list, err := c.MemberList(lctx)
	if err != nil {
		w.etcd.err = err
		return
	}
	w.etcd.list = list
}

// needsClusterVersion: the version is being changed (a member runs or asks
// for another version than the target, the recorded cluster version is not
// the target's minor, or a downgrade is enabled).
func needsClusterVersion(w *world) bool {
	o := w.cluster.Status.Observed
	if o == nil {
		return false
	}
	if w.etcd.leader != nil && w.etcd.leader.DowngradeTarget != "" {
		return true
	}
	target, err := version.Parse(o.Version)
	if err != nil {
		return false
	}
	if w.cluster.Status.ClusterVersion != target.MinorString() {
		return true
	}
	for _, m := range w.running() {
		if m.Spec.Version != o.Version || (m.Status.Version != "" && m.Status.Version != o.Version) {
			return true
		}
	}
	return false
}

// readClusterVersion reads the cluster version from the leader (else any
// member that answers); report records it in status.
func (r *Reconciler) readClusterVersion(ctx context.Context, w *world, c etcd.Client) {
	order := w.inEtcd()
	if lm := w.leaderMember(); lm != nil {
		order = append([]*v1alpha2.EtcdMember{lm}, order...)
	}
	for _, m := range order {
		if w.etcd.status[m.Name] == nil {
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, statusTimeout)
		cv, err := c.ClusterVersion(vctx, manifest.ClientURL(m))
		cancel()
		if err == nil {
			w.etcd.clusterVersion = cv
			if w.etcd.leader != nil {
				w.etcd.downgradeTarget = w.etcd.leader.DowngradeTarget
			}
			return
		}
	}
}

// dial connects to the given members.
func (r *Reconciler) dial(ctx context.Context, w *world, via []*v1alpha2.EtcdMember) (etcd.Client, error) {
	cfg, err := etcdconn.Config(ctx, r.APIReader, r.Client, w.cluster, via)
	if err != nil {
		return nil, err
	}
	return r.Dial(ctx, cfg)
}
