package cluster

import (
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// world is everything one pass decides from, gathered once by observe
// (observe.go) before anything is decided: the cluster, its members (found
// through their controller reference, never by label), their Pods, the
// Secrets they mount, the headless Service's endpoints, one "now", and
// etcd's own fresh view of itself; maintain (controller.go) completes it
// with what the steps beside membership found (features; the auth step's
// outcome goes in through after). From then on it is read-only: the
// planner (plan.go) reads it, actions read it and return what they learned
// in their outcome, and a pass that goes on after an action decides on a
// new world (after, without). Only report (status.go) writes the status,
// into the world it reports on, just before the write to the API.
type world struct {
	cluster *v1alpha2.EtcdCluster
	// original is the cluster as read, to write status only when it changed.
	original *v1alpha2.EtcdCluster
	members  []*v1alpha2.EtcdMember
	now      time.Time

	// pods are the members' Pods by member name (from the cache).
	pods map[string]*corev1.Pod
	// claimsGoing names the members whose claim is being deleted (from the
	// cache): held by their Pod, they still serve until replaced.
	claimsGoing map[string]bool
	// published are the Pod addresses the EndpointSlices of each headless
	// Service list, by Service name: what cluster DNS answers from.
	published map[string]map[string]bool
	// secrets are the Secrets the running members mount, by name (read
	// through package secretcache); secretProblem says which one, or which
	// key of one, is missing.
	secrets       map[string]*corev1.Secret
	secretProblem string
	// nodes are the cluster's nodes, read (from the cache) only when two
	// running members share one (spread.go); nodesErr: they could not be.
	nodes    []corev1.Node
	nodesErr error
	// handover is the TLS hand-over, if one runs (handover.go).
	handover handover
	// joinGate: the operator's image is configured, so a joining member's
	// Pod starts before its add, held by the join gate (package join).
	joinGate bool

	// removed are the members this process removed from etcd lately (by
	// UID), which a stale cache may still list: nobody asks their etcd.
	removed map[types.UID]bool

	// etcd is etcd's own view, read fresh in this pass.
	etcd etcdView
	// seen is the last report each member's etcd gave this operator
	// process, by member name: what a recovery plan knows of members that
	// no longer answer.
	seen map[string]seenReport
	// recoverySnapshot is the EtcdSnapshot a recovery request names (nil
	// when none is named or it does not exist; recoverySnapshotErr says
	// why it could not be read).
	recoverySnapshot    *v1alpha2.EtcdSnapshot
	recoverySnapshotErr error
	// defrags are the EtcdDefrags that name the cluster (from the cache):
	// their requests for the maintenance lock (maintenance_lock.go);
	// defragsUnknown: they could not be listed.
	defrags        []*v1alpha2.EtcdDefrag
	defragsUnknown bool
	// before is the snapshot a changed spec waits for
	// (spec.snapshotBefore), read only while the spec asks for a change it
	// guards (snapshot_before.go).
	before beforeView
	// features are what the steps beside membership found (certificates,
	// Services, the root password): reported, never a reason to stop
	// membership repair.
	features features
}

// etcdView is what etcd said about itself in this pass.
type etcdView struct {
	// asked: some member was asked (none runs while paused or before the
	// seed's Pod exists).
	asked bool
	// list is etcd's membership, read through the leader; nil when it
	// could not be read, and err says why.
	list *etcd.MemberList
	err  error
	// status is each asked member's report on itself, by EtcdMember name;
	// statusErr why a member did not answer.
	status    map[string]*etcd.Status
	statusErr map[string]error
	// health is the /health answer (nil: healthy) of each member that did
	// not answer its Status call while its Pod was Ready: a member whose
	// etcd has not published itself through raft yet serves /health but
	// not its client port.
	health map[string]error
	// leader is the leader's own report: the member that reports itself as
	// leader in the highest term. Nil when no member that answered leads.
	leader *etcd.Status
	// clusterVersion is etcd's cluster version, read only while the
	// version is being changed ("" otherwise). Read it through
	// world.clusterVersion; report records it in status.
	clusterVersion string
	// downgradeTarget is the version of a downgrade etcd has enabled.
	downgradeTarget string
}

// features are findings of the steps that run beside the membership
// planner. None of them can make a membership change unsafe, so none of
// them holds one back.
type features struct {
	// certManagerMissing: the cluster's TLS asks for cert-manager, which the
	// API server does not serve.
	certManagerMissing string
	// foreignCertificates describe Certificates of the operator's names
	// that the cluster does not control.
	foreignCertificates []string
	// failed are the feature steps that failed this pass, with the error.
	failed []string
	// auth is why etcd refuses the operator's credentials (or wants some the
	// spec does not give).
	auth *finding
}

// finding is a reason and a message, for a condition and an Event.
type finding struct {
	reason  string
	message string
}

// desired is the latched number of members.
func (w *world) desired() int {
	if w.cluster.Status.Observed == nil {
		return 0
	}
	return int(w.cluster.Status.Observed.Replicas)
}

// learned is what an action did or found that the rest of the pass must
// see (the planner deciding again, the budget, the status): actions never
// write the world, they return this in their outcome, and after folds it
// into a new world.
type learned struct {
	// latched is the status a latch wrote.
	latched *v1alpha2.EtcdClusterStatus
	// created is a member just created.
	created *v1alpha2.EtcdMember
	// added is a learner etcd just added.
	added *etcd.Member
	// rollOut is status.lastRollOut after a restart.
	rollOut *v1alpha2.RollOutStatus
	// authEnabled: authentication was just turned on.
	authEnabled bool
	// auth is why etcd refused the operator's credentials.
	auth *finding
	// failed are steps that failed after the plan (the budget).
	failed []string
}

// clusterVersion is etcd's cluster version: as read this pass, else as
// recorded in status.
func (w *world) clusterVersion() string {
	if w.etcd.clusterVersion != "" {
		return w.etcd.clusterVersion
	}
	return w.cluster.Status.ClusterVersion
}

// after is the world as it is once an action did what l says: a new
// world, sharing what did not change. It is the only way anything enters
// a world after observe (and maintain, which completes it) built it.
func (w *world) after(l learned) *world {
	n := *w
	if l.latched != nil || l.rollOut != nil || l.authEnabled {
		n.cluster = w.cluster.DeepCopy()
		if l.latched != nil {
			n.cluster.Status = *l.latched.DeepCopy()
		}
		if l.rollOut != nil {
			n.cluster.Status.LastRollOut = l.rollOut
		}
		if l.authEnabled {
			n.cluster.Status.AuthEnabled = true
		}
	}
	if l.created != nil {
		n.members = append(slices.Clone(w.members), l.created)
	}
	if l.added != nil && w.etcd.list != nil {
		list := *w.etcd.list
		list.Members = append(slices.Clone(list.Members), *l.added)
		n.etcd.list = &list
	}
	if l.auth != nil {
		n.features.auth = l.auth
	}
	if len(l.failed) > 0 {
		n.features.failed = append(slices.Clone(w.features.failed), l.failed...)
	}
	return &n
}

// without is the world after m was removed from etcd and its EtcdMember
// released (removeFromEtcd): etcd no longer lists it, and it is neither a
// member nor a Pod of the cluster any more (see goOn). A new world, like
// after's.
func (w *world) without(m *v1alpha2.EtcdMember) *world {
	n := *w
	if w.etcd.list != nil {
		if em := w.etcdMemberOf(m); em != nil {
			id := em.ID
			list := *w.etcd.list
			list.Members = slices.DeleteFunc(slices.Clone(list.Members), func(x etcd.Member) bool { return x.ID == id })
			n.etcd.list = &list
		}
	}
	n.members = slices.DeleteFunc(slices.Clone(w.members), func(x *v1alpha2.EtcdMember) bool { return x == m })
	n.pods = maps.Clone(w.pods)
	delete(n.pods, m.Name)
	n.etcd.status, n.etcd.statusErr, n.etcd.health = maps.Clone(w.etcd.status), maps.Clone(w.etcd.statusErr), maps.Clone(w.etcd.health)
	delete(n.etcd.status, m.Name)
	delete(n.etcd.statusErr, m.Name)
	delete(n.etcd.health, m.Name)
	return &n
}

func deleting(m *v1alpha2.EtcdMember) bool { return m.DeletionTimestamp != nil }

// running are members meant to have a Pod and counted towards the target:
// not deleted, not dormant.
func (w *world) running() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && !m.Spec.Dormant })
}

func (w *world) dormant() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && m.Spec.Dormant })
}

// leaving are the deleted members: each leaves etcd before it goes.
func (w *world) leaving() []*v1alpha2.EtcdMember {
	return w.filter(deleting)
}

// pending are members etcd may not know yet: created, no initialCluster.
func (w *world) pending() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool { return !deleting(m) && m.Spec.InitialCluster == "" })
}

func (w *world) seed() *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if m.Spec.Bootstrap && !deleting(m) {
			return m
		}
	}
	return nil
}

func (w *world) filter(keep func(*v1alpha2.EtcdMember) bool) []*v1alpha2.EtcdMember {
	var out []*v1alpha2.EtcdMember
	for _, m := range w.members {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

func lost(m *v1alpha2.EtcdMember) bool {
	return conditions.IsTrue(m.Status.Conditions, conditions.Lost)
}

// isVoter reports whether etcd lists the member as a voter, or, when etcd's
// membership could not be read, whether the member's status says so.
func (w *world) isVoter(m *v1alpha2.EtcdMember) bool {
	if w.etcd.list == nil {
		return m.Status.IsVoter
	}
	em := w.etcdMemberOf(m)
	return em != nil && !em.IsLearner
}

// memberOf finds the EtcdMember etcd knows as em: by the member ID the
// member recorded, else by the peer URL its spec determines. Either one
// suffices, so neither a lost status nor an edited annotation makes a member
// look like a stranger.
func (w *world) memberOf(em etcd.Member) *v1alpha2.EtcdMember {
	id := etcd.FormatID(em.ID)
	for _, m := range w.members {
		if m.Status.MemberID == id {
			return m
		}
	}
	for _, m := range w.members {
		if slices.Contains(em.PeerURLs, manifest.PeerURL(m)) {
			return m
		}
	}
	return nil
}

// etcdMemberOf finds a member in etcd's membership, the same way.
func (w *world) etcdMemberOf(m *v1alpha2.EtcdMember) *etcd.Member {
	if w.etcd.list == nil {
		return nil
	}
	for i := range w.etcd.list.Members {
		if w.memberOf(w.etcd.list.Members[i]) == m {
			return &w.etcd.list.Members[i]
		}
	}
	return nil
}

// byID finds the member etcd knows under an ID.
func (w *world) byID(id uint64) *v1alpha2.EtcdMember {
	if w.etcd.list == nil {
		return nil
	}
	for _, em := range w.etcd.list.Members {
		if em.ID == id {
			return w.memberOf(em)
		}
	}
	return nil
}

// learner returns etcd's learner, if there is one.
func (w *world) learner() *etcd.Member {
	if w.etcd.list == nil {
		return nil
	}
	for i := range w.etcd.list.Members {
		if w.etcd.list.Members[i].IsLearner {
			return &w.etcd.list.Members[i]
		}
	}
	return nil
}

// strangerName names an etcd member no EtcdMember accounts for.
func strangerName(em etcd.Member) string {
	if em.Name != "" {
		return em.Name
	}
	return "id:" + etcd.FormatID(em.ID)
}

// inEtcd are the members whose etcd may run: those with an initialCluster
// and a Pod, dormant ones aside. They are the ones asked about themselves.
func (w *world) inEtcd() []*v1alpha2.EtcdMember {
	return w.filter(func(m *v1alpha2.EtcdMember) bool {
		return !m.Spec.Dormant && m.Spec.InitialCluster != "" && w.pods[m.Name] != nil && !w.removed[m.UID]
	})
}

// leaderMember is the member that leads, by etcd's fresh report.
func (w *world) leaderMember() *v1alpha2.EtcdMember {
	if w.etcd.leader == nil {
		return nil
	}
	return w.byID(w.etcd.leader.MemberID)
}

// upToDate reports whether a running member was made from the latched
// target and its Pod runs it. A member without a Pod is not up to date: its
// Pod is being made again, and until it runs, what it will run is unproven.
func (w *world) upToDate(m *v1alpha2.EtcdMember) bool {
	return w.runsTarget(m) && manifest.TLSStage(m, w.handover.final) == manifest.StageFinal
}

// runsTarget is upToDate but for the stage of a TLS hand-over: the member
// and its Pod run the target, and the Pod its member's TLS as it is.
func (w *world) runsTarget(m *v1alpha2.EtcdMember) bool {
	if w.cluster.Status.Observed == nil || !manifest.UpToDate(m, w.cluster.Status.Observed) {
		return false
	}
	p := w.pods[m.Name]
	if p == nil {
		return false
	}
	if h := p.Annotations[manifest.AnnotationTemplateHash]; h != "" && h != manifest.TemplateHash(m) {
		return false
	}
	return len(w.changedSecrets(m)) == 0 && !conditions.IsFalse(m.Status.Conditions, conditions.StorageResized) &&
		manifest.PodTLSCurrent(p, m)
}

// changedSecrets lists the Secrets whose material changed since the
// member's Pod started (see manifest.AnnotationSecretHashes).
func (w *world) changedSecrets(m *v1alpha2.EtcdMember) []string {
	p := w.pods[m.Name]
	if p == nil || len(w.secrets) == 0 {
		return nil
	}
	return manifest.ChangedSecrets(p.Annotations[manifest.AnnotationSecretHashes], manifest.HashSecrets(manifest.MountedSecrets(m), w.secrets))
}

// updated counts the running members that are up to date.
func (w *world) updated() int {
	n := 0
	for _, m := range w.running() {
		if w.upToDate(m) {
			n++
		}
	}
	return n
}

// newest sorts members so the most recently created comes first.
func newest(ms []*v1alpha2.EtcdMember) []*v1alpha2.EtcdMember {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b *v1alpha2.EtcdMember) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out
}
