package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdhealth"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The planner's table: a world in, one change (or none) and its reasons
// out. Each row is a situation the issues described; the lifecycle harness
// (package lifecycle) runs the same situations end to end against the fake
// etcd, and these rows pin the decision itself.

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// healthyWorld is a formed cluster of n voters, all healthy, m0 leading,
// every member up to date; mods change it.
func healthyWorld(n int, mods ...func(*world)) *world {
	c := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "cuid", Generation: 1},
		Spec:       v1alpha2.EtcdClusterSpec{Replicas: ptr.To(int32(n)), Version: "3.6.16", Storage: v1alpha2.StorageSpec{Size: mustQuantity("1Gi")}},
	}
	c.Status.ClusterToken = "tok"
	c.Status.Observed = manifest.Observe(&c.Spec)
	c.Status.ClusterID = etcd.FormatID(0xc1)
	c.Status.ClusterVersion = "3.6"
	w := &world{cluster: c, original: c.DeepCopy(), now: t0, pods: map[string]*corev1.Pod{}, joinGate: true}
	w.etcd = etcdView{asked: true, list: &etcd.MemberList{ClusterID: 0xc1}, status: map[string]*etcd.Status{}, statusErr: map[string]error{}}
	for i := range n {
		addMember(w, fmt.Sprintf("m%d", i), t0.Add(time.Duration(i)*time.Minute))
	}
	w.etcd.leader = w.etcd.status["m0"]
	for _, mod := range mods {
		mod(w)
	}
	return w
}

// addMember adds a healthy voter running the target.
func addMember(w *world, name string, created time.Time) *v1alpha2.EtcdMember {
	m := manifest.NewMember(w.cluster, false)
	m.Name, m.UID, m.CreationTimestamp = name, types.UID("uid-"+name), metav1.NewTime(created)
	m.Spec.InitialCluster = name + "=" + manifest.PeerURL(m)
	id := uint64(0x10 + len(w.members))
	m.Status = v1alpha2.EtcdMemberStatus{MemberID: etcd.FormatID(id), IsVoter: true, PodName: name, PodUID: "pod-" + name, Version: "3.6.16"}
	m.Status.Conditions = []metav1.Condition{{Type: conditions.Ready, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	w.members = append(w.members, m)
	w.pods[name] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("pod-" + name), Annotations: map[string]string{manifest.AnnotationTemplateHash: manifest.TemplateHash(m)},
			Labels: map[string]string{manifest.LabelRole: manifest.RoleVoter}},
		Status: corev1.PodStatus{PodIP: "10.0.0." + fmt.Sprint(len(w.members)), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	w.etcd.list.Members = append(w.etcd.list.Members, etcd.Member{ID: id, Name: name, PeerURLs: []string{manifest.PeerURL(m)}})
	w.etcd.status[name] = &etcd.Status{ClusterID: 0xc1, MemberID: id, Leader: 0x10, RaftTerm: 5, RaftAppliedIndex: 1000, Version: "3.6.16"}
	return m
}

func member(w *world, name string) *v1alpha2.EtcdMember {
	for _, m := range w.members {
		if m.Name == name {
			return m
		}
	}
	panic("no member " + name)
}

// Modifiers.

func cutOff(name string) func(*world) {
	return func(w *world) {
		st := w.etcd.status[name]
		st.Leader, st.RaftTerm, st.RaftAppliedIndex = 0, 4, 400
		st.Errors = []string{"etcdserver: no leader"}
	}
}

func podNotReady(name string) func(*world) {
	return func(w *world) { w.pods[name].Status.Conditions[0].Status = corev1.ConditionFalse }
}

func noPod(name string) func(*world) {
	return func(w *world) {
		delete(w.pods, name)
		delete(w.etcd.status, name)
		w.etcd.statusErr[name] = fmt.Errorf("connection refused")
	}
}

// podReplaced: a new Pod runs that the member controller has not observed.
func podReplaced(name string) func(*world) {
	return func(w *world) { w.pods[name].UID = types.UID("pod-" + name + "-2") }
}

// rolledOut: the member runs the latched target (re-templated, its Pod
// made from it).
func rolledOut(name string) func(*world) {
	return func(w *world) {
		m := member(w, name)
		manifest.Retemplate(m, w.cluster.Status.Observed)
		w.pods[name].Annotations[manifest.AnnotationTemplateHash] = manifest.TemplateHash(m)
	}
}

func deletedMember(name string) func(*world) {
	return func(w *world) {
		m := member(w, name)
		m.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		m.Finalizers = []string{manifest.MemberFinalizer}
	}
}

func lostMember(name, reason string) func(*world) {
	return func(w *world) {
		m := member(w, name)
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: conditions.Lost, Status: metav1.ConditionTrue, Reason: reason, Message: "gone"})
		noPod(name)(w)
	}
}

func wantVersion(v string) func(*world) {
	return func(w *world) {
		w.cluster.Spec.Version = v
		w.cluster.Status.Observed.Version = v
	}
}

func wantReplicas(n int32) func(*world) {
	return func(w *world) {
		w.cluster.Spec.Replicas = ptr.To(n)
		w.cluster.Status.Observed.Replicas = n
	}
}

func leaderIs(name string) func(*world) {
	return func(w *world) {
		lead := w.etcd.status[name]
		for _, st := range w.etcd.status {
			st.Leader = lead.MemberID
		}
		w.etcd.leader = lead
	}
}

// w3LearnerID is the etcd ID addMember gives a fourth member (learner "m3"
// of a healthy 3-member world).
const w3LearnerID = 0x13

func learner(name string, applied uint64) func(*world) {
	return func(w *world) {
		m := addMember(w, name, t0.Add(time.Hour))
		m.Status.IsVoter = false
		w.etcd.list.Members[len(w.etcd.list.Members)-1].IsLearner = true
		st := w.etcd.status[name]
		st.IsLearner, st.RaftAppliedIndex = true, applied
	}
}

// unpublished: the member runs but its etcd has not published itself
// through raft yet, so it has never answered a status call since its Pod
// started (its member records no version): the call times out, and its
// /health (asked in the pass) gives herr (nil: healthy). etcd's leader may
// list it by name already (the publish was committed and reached the
// member only in the leader's snapshot) or not yet (listed says which).
func unpublished(name string, herr error, listed bool) func(*world) {
	return func(w *world) {
		w.pods[name].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: manifest.EtcdContainer,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(w.now.Add(-5 * time.Second))}}}}
		delete(w.etcd.status, name)
		member(w, name).Status.Version = ""
		w.etcd.statusErr[name] = fmt.Errorf("context deadline exceeded")
		if w.etcd.health == nil {
			w.etcd.health = map[string]error{}
		}
		w.etcd.health[name] = herr
		for i := range w.etcd.list.Members {
			if w.etcd.list.Members[i].Name == name && !listed {
				w.etcd.list.Members[i].Name = ""
			}
		}
	}
}

type row struct {
	name string
	w    *world
	// kind and member are the change expected (kind 0: none).
	kind   changeKind
	member string
	// refused, progress: text the plan's refusal or progress must hold.
	refused, progress string
	check             func(*testing.T, plan)
}

func runRows(t *testing.T, rows []row) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := decide(r.w)
			switch {
			case r.kind == 0 && p.change != nil:
				t.Errorf("change %v %s, want none (progress %q, refused %v)", p.change.kind, nameOf(p.change.member), p.progress.message, p.refused)
			case r.kind != 0 && p.change == nil:
				t.Errorf("no change, want %v %s (progress %q, refused %v)", r.kind, r.member, p.progress.message, p.refused)
			case r.kind != 0 && (p.change.kind != r.kind || nameOf(p.change.member) != r.member):
				t.Errorf("change %v %s, want %v %s", p.change.kind, nameOf(p.change.member), r.kind, r.member)
			}
			if r.refused != "" && !refusedWith(p, r.refused) {
				t.Errorf("refusals %v, want one saying %q", p.refused, r.refused)
			}
			if r.progress != "" && !strings.Contains(p.progress.message, r.progress) {
				t.Errorf("progress %q, want it to say %q", p.progress.message, r.progress)
			}
			if r.check != nil {
				r.check(t, p)
			}
		})
	}
}

func nameOf(m *v1alpha2.EtcdMember) string {
	if m == nil {
		return ""
	}
	return m.Name
}

func refusedWith(p plan, text string) bool {
	for _, f := range p.refused {
		if strings.Contains(f.message, text) {
			return true
		}
	}
	return false
}

// Issue 20's claims, as decisions.
func TestPlanHealthIsWhatEtcdSays(t *testing.T) {
	runRows(t, []row{
		{name: "steady: nothing to do", w: healthyWorld(3)},
		{name: "claim 1: a roll-out restarts no connected member while a follower is cut off: the cut one goes first",
			w: healthyWorld(3, wantVersion("3.6.17"), cutOff("m2")), kind: restart, member: "m2"},
		{name: "claim 1: once the cut member runs the target, the roll waits for it",
			w: healthyWorld(3, wantVersion("3.6.17"), rolledOut("m2"), cutOff("m2")), progress: "m2"},
		{name: "claim 1: the roll goes on once the cut member is back",
			w: healthyWorld(3, wantVersion("3.6.17")), kind: restart, member: "m1"},
		{name: "claim 2: a Pod the member controller has not observed yet is not proof of health",
			w: healthyWorld(3, wantVersion("3.6.17"), rolledOut("m1"), podReplaced("m1")), progress: "not observed"},
		{name: "claim 2: a restarted member without a Pod holds the roll, whatever its cached Ready says",
			w: healthyWorld(3, wantVersion("3.6.17"), rolledOut("m1"), noPod("m1")), progress: "m1"},
		{name: "claim 2: a restarted member whose Pod is not Ready holds the roll",
			w: healthyWorld(3, wantVersion("3.6.17"), rolledOut("m2"), podNotReady("m2")), progress: "m2"},
		{name: "a member restarted to take a snapshot before its next minor comes back before it moves on",
			w: healthyWorld(3, wantVersion("3.7.3"), podNotReady("m1"), func(w *world) {
				m := member(w, "m1")
				m.Annotations = map[string]string{manifest.AnnotationSnapshotCount: "1"}
				w.pods["m1"].Annotations[manifest.AnnotationTemplateHash] = manifest.TemplateHash(m)
			}), progress: "m1"},
		{name: "claim 2: two members down hold the roll",
			w: healthyWorld(3, wantVersion("3.6.17"), podNotReady("m1"), podNotReady("m2")), progress: "healthy"},
		{name: "claim 3: a member whose data directory was lost is replaced",
			w: healthyWorld(3, lostMember("m2", conditions.ReasonDataDirLost)), kind: deleteMember, member: "m2"},
		{name: "claim 5: a downgrade etcd still runs for a target that went back up is cancelled",
			w: healthyWorld(3, func(w *world) { w.etcd.downgradeTarget = "3.5.0" }), kind: cancelDowngrade},
		{name: "claim 5: the downgrade of the target itself is left alone",
			w:    healthyWorld(3, wantVersion("3.5.35"), func(w *world) { w.etcd.downgradeTarget = "3.5.0"; w.etcd.clusterVersion = "3.5" }),
			kind: restart, member: "m1"},
		{name: "claim 7: a deleted member that serves waits for its replacement, which is created",
			w: healthyWorld(3, deletedMember("m1")), kind: createJoiner, progress: ""},
		{name: "claim 7: every member deleted: none leaves, a replacement is created",
			w: healthyWorld(3, deletedMember("m0"), deletedMember("m1"), deletedMember("m2")), kind: createJoiner},
		{name: "claim 7: once the replacements serve, a deleted member leaves etcd",
			w: healthyWorld(4, deletedMember("m1"), wantReplicas(3)), kind: removeFromEtcd, member: "m1"},
		{name: "claim 7: a deleted member that does not serve leaves at once",
			w: healthyWorld(3, deletedMember("m2"), noPod("m2")), kind: removeFromEtcd, member: "m2"},
		{name: "claim 8: a NOSPACE alarm does not hold a scale-up",
			w: healthyWorld(3, wantReplicas(5), func(w *world) {
				w.etcd.status["m0"].Errors = []string{"memberID:16 alarm:NOSPACE "}
			}), kind: createJoiner},
		{name: "claim 9: a roll restarts followers first",
			w: healthyWorld(3, wantVersion("3.6.17"), leaderIs("m0")), kind: restart, member: "m1"},
		{name: "claim 9: the leader goes last, handing its leadership over",
			w: healthyWorld(3, wantVersion("3.6.17"), leaderIs("m0"), rolledOut("m1"), rolledOut("m2")), kind: restart, member: "m0", check: func(t *testing.T, p plan) {
				if p.change.handOver == nil || p.change.handOver.Name != "m1" {
					t.Errorf("the leader does not hand over to the oldest healthy follower: %v", nameOf(p.change.handOver))
				}
			}},
		{name: "claim 10: cert-manager gone from a formed cluster does not stop repair",
			w:    healthyWorld(3, lostMember("m1", conditions.ReasonNodeLost), func(w *world) { w.features.certManagerMissing = "not installed" }),
			kind: deleteMember, member: "m1"},
		{name: "claim 10: a cluster that never formed waits for cert-manager",
			w: healthyWorld(0, func(w *world) {
				w.cluster.Status.ClusterID = ""
				w.etcd = etcdView{}
				w.cluster.Spec.Replicas = ptr.To(int32(3))
				w.cluster.Status.Observed.Replicas = 3
				w.features.certManagerMissing = "not installed"
			}), check: func(t *testing.T, p plan) {
				if p.hold == nil || p.hold.reason != conditions.ReasonCertManagerNotInstalled {
					t.Errorf("hold %+v", p.hold)
				}
			}},
	})
}

// Claim 6: the paused cluster's deleted dormant member.
func TestPlanDeletedDormantMember(t *testing.T) {
	paused := func(w *world) {
		w.cluster.Status.Observed.Replicas, w.cluster.Spec.Replicas = 0, ptr.To(int32(0))
		w.members = w.members[:1]
		w.members[0].Spec.Dormant = true
		delete(w.pods, "m0")
		w.etcd = etcdView{}
	}
	runRows(t, []row{
		{name: "paused: the deleted dormant member is kept, and the cluster says why",
			w: healthyWorld(3, paused, deletedMember("m0")), progress: "resumed"},
		{name: "resumed: the deleted dormant member runs again",
			w: healthyWorld(3, paused, deletedMember("m0"), wantReplicas(3)), kind: wake, member: "m0"},
	})
}

// Claim 4: a member that joins while a downgrade has not lowered etcd's
// cluster version yet runs the version the cluster accepts.
func TestJoinVersion(t *testing.T) {
	for _, c := range []struct {
		name, target, cluster, want string
	}{
		{"no version change", "3.6.16", "3.6", "3.6.16"},
		{"an upgrade: the newer minor may join", "3.7.3", "3.6", "3.7.3"},
		{"a downgrade not yet lowered: the running minor", "3.5.35", "3.6", "3.6.16"},
		{"a downgrade lowered: the target", "3.5.35", "3.5", "3.5.35"},
		{"no cluster version known: the target", "3.5.35", "", "3.5.35"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := healthyWorld(3, wantVersion(c.target), func(w *world) { w.cluster.Status.ClusterVersion = c.cluster })
			if got := joinVersion(w); got != c.want {
				t.Errorf("joinVersion = %s, want %s", got, c.want)
			}
		})
	}
}

// Issue 8's hardening claims, as decisions.
func TestPlanHardening(t *testing.T) {
	runRows(t, []row{
		{name: "a missed deadline does not stop the repair of a lost member",
			w: healthyWorld(3, lostMember("m1", conditions.ReasonNodeLost), func(w *world) {
				w.cluster.Status.ProgressDeadline = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
			}), kind: deleteMember, member: "m1"},
		{name: "a stuck learner does not keep a lost voter from leaving",
			w:    healthyWorld(5, learner("m5", 0), lostMember("m1", conditions.ReasonNodeLost), deletedMember("m1")),
			kind: removeFromEtcd, member: "m1"},
		{name: "a removal that would lose quorum is refused, and the repair of another member goes on",
			w:    healthyWorld(5, deletedMember("m1"), wantReplicas(2), podNotReady("m2"), lostMember("m3", conditions.ReasonNodeLost)),
			kind: deleteMember, member: "m3", refused: "m1"},
		{name: "the leader hands over before it is removed",
			w: healthyWorld(4, deletedMember("m0"), wantReplicas(3)), kind: removeFromEtcd, member: "m0",
			check: func(t *testing.T, p plan) {
				if p.change.handOver == nil {
					t.Error("the leader is removed without handing over")
				}
			}},
		{name: "a member is found by its recorded ID whatever its labels",
			w: healthyWorld(3, func(w *world) { member(w, "m1").Labels = nil }), kind: 0},
		{name: "etcd answering as another cluster holds every change",
			w: healthyWorld(3, lostMember("m1", conditions.ReasonNodeLost), func(w *world) { w.etcd.list.ClusterID = 0xdead }),
			check: func(t *testing.T, p plan) {
				if p.hold == nil || p.hold.reason != conditions.ReasonClusterIDMismatch {
					t.Errorf("hold %+v", p.hold)
				}
			}},
		{name: "a lost cluster ID is recovered from the members",
			w: healthyWorld(3, func(w *world) { w.cluster.Status.ClusterID = "" }), kind: latchStatus,
			check: func(t *testing.T, p plan) {
				if p.change.status.ClusterID != etcd.FormatID(0xc1) {
					t.Errorf("recovered %q", p.change.status.ClusterID)
				}
			}},
		{name: "a caught-up learner is promoted",
			w: healthyWorld(3, learner("m3", 990), wantReplicas(4)), kind: promote, member: "m3"},
		{name: "a caught-up learner is promoted before its member records the ID (its own answer in this pass proves it)",
			w:    healthyWorld(3, learner("m3", 990), wantReplicas(4), func(w *world) { member(w, "m3").Status.MemberID = "" }),
			kind: promote, member: "m3",
			check: func(t *testing.T, p plan) {
				if p.change.etcdID != w3LearnerID {
					t.Errorf("promotes %x, etcd lists the learner as %x", p.change.etcdID, w3LearnerID)
				}
			}},
		{name: "a learner that does not answer is not promoted",
			w: healthyWorld(3, learner("m3", 990), wantReplicas(4), func(w *world) {
				member(w, "m3").Status.MemberID = ""
				delete(w.etcd.status, "m3")
				w.etcd.statusErr["m3"] = fmt.Errorf("context deadline exceeded")
			}), kind: 0, progress: "catch up"},
		{name: "a learner that answers as another member is not promoted",
			w: healthyWorld(3, learner("m3", 990), wantReplicas(4), func(w *world) {
				member(w, "m3").Status.MemberID = ""
				w.etcd.status["m3"].MemberID = 0x99
			}), kind: 0, progress: "answers as member 0000000000000099"},
		{name: "a learner behind the leader waits",
			w: healthyWorld(3, learner("m3", 100), wantReplicas(4)), kind: 0, progress: "catch up"},
		{name: "scaling down removes the newest member, from etcd in the same pass",
			w: healthyWorld(3, wantReplicas(2)), kind: deleteMember, member: "m2",
			check: func(t *testing.T, p plan) {
				if !p.change.thenRemove || p.change.etcdID != 0x12 || p.change.handOver != nil {
					t.Errorf("removal from etcd %t of %x, hand-over %v", p.change.thenRemove, p.change.etcdID, p.change.handOver)
				}
			}},
		{name: "scaling down the leader hands its leadership to a voter that serves",
			w: healthyWorld(3, wantReplicas(2), leaderIs("m2"), unpublished("m0", nil, true)), kind: deleteMember, member: "m2",
			check: func(t *testing.T, p plan) {
				if !p.change.thenRemove || nameOf(p.change.handOver) != "m1" {
					t.Errorf("removal from etcd %t, hand-over to %s", p.change.thenRemove, nameOf(p.change.handOver))
				}
			}},
		{name: "scaling down removes an unhealthy member first",
			w: healthyWorld(3, wantReplicas(2), cutOff("m0"), leaderIs("m1")), kind: deleteMember, member: "m0"},
		{name: "pausing makes the last member dormant",
			w: healthyWorld(1, wantReplicas(0)), kind: setDormant, member: "m0"},
		{name: "etcd unreachable: nothing is changed",
			w:        healthyWorld(3, lostMember("m1", conditions.ReasonNodeLost), func(w *world) { w.etcd.list, w.etcd.err = nil, fmt.Errorf("timeout") }),
			progress: "Cannot read"},
	})
}

// The status a plan leads to: NOSPACE reported with what to do (claim 8).
func TestStatusReportsAlarms(t *testing.T) {
	w := healthyWorld(3, func(w *world) {
		for _, st := range w.etcd.status {
			st.Errors = []string{"memberID:16 alarm:NOSPACE "}
		}
	})
	p := decide(w)
	setAvailable(w, p)
	setDegraded(w, p)
	if !conditions.IsTrue(w.cluster.Status.Conditions, conditions.Available) {
		t.Errorf("not Available under NOSPACE: %+v", w.cluster.Status.Conditions)
	}
	d := conditions.Get(w.cluster.Status.Conditions, conditions.Degraded)
	if d == nil || d.Reason != conditions.ReasonAlarm || !strings.Contains(d.Message, "defrag") {
		t.Errorf("Degraded %+v", d)
	}
}

// What healthy means, reason by reason.
func TestHealth(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*world)
		why  string
	}{
		{"healthy", func(*world) {}, ""},
		{"no leader", cutOff("m1"), "no leader"},
		{"another term", func(w *world) { w.etcd.status["m1"].RaftTerm = 4 }, "term 4"},
		{"behind", func(w *world) { w.etcd.status["m0"].RaftAppliedIndex = 1000 + etcdhealth.MaxAppliedLag + 1 }, "trails"},
		{"no answer", func(w *world) { delete(w.etcd.status, "m1"); w.etcd.statusErr["m1"] = fmt.Errorf("refused") }, "does not answer"},
		{"no Pod", func(w *world) { delete(w.pods, "m1") }, "no Pod"},
		{"Pod terminating", func(w *world) { w.pods["m1"].DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }, "terminating"},
		{"Pod not observed", podReplaced("m1"), "not observed"},
		{"Pod not Ready", podNotReady("m1"), "not Ready"},
		{"lost", lostMember("m1", conditions.ReasonPodLost), "lost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := healthyWorld(3, c.mod)
			ok, why := w.health(member(w, "m1"))
			if ok != (c.why == "") || !strings.Contains(why, c.why) {
				t.Errorf("health = %t %q, want %q", ok, why, c.why)
			}
		})
	}
}

// A member that joined serves clients only once it knows it has published
// itself through raft: seconds after it runs when it caught up from the
// leader's snapshot. The joins go on meanwhile, on its /health.
func TestPlanJoinsBeforeTheMemberServes(t *testing.T) {
	runRows(t, []row{
		{name: "a learner that has not published itself yet is promoted on its /health: etcd's own promotion check decides the rest",
			w:    healthyWorld(3, learner("m3", 990), wantReplicas(4), unpublished("m3", nil, false), func(w *world) { member(w, "m3").Status.MemberID = "" }),
			kind: promote, member: "m3",
			check: func(t *testing.T, p plan) {
				if p.change.etcdID != w3LearnerID {
					t.Errorf("promotes %x, etcd lists the learner as %x", p.change.etcdID, w3LearnerID)
				}
			}},
		{name: "so is one the leader lists by name already (its publish reached it only in the leader's snapshot)",
			w:    healthyWorld(3, learner("m3", 990), wantReplicas(4), unpublished("m3", nil, true)),
			kind: promote, member: "m3"},
		{name: "a learner that has not published itself and fails its /health is not promoted",
			w:    healthyWorld(3, learner("m3", 990), wantReplicas(4), unpublished("m3", etcd.ErrNotHealthy, true)),
			kind: 0, progress: "does not serve clients yet"},
		{name: "a learner that served once and then stopped answering is not promoted on its /health",
			w: healthyWorld(3, learner("m3", 990), wantReplicas(4), unpublished("m3", nil, true), func(w *world) {
				member(w, "m3").Status.Version = "3.6.16"
			}), kind: 0, progress: "catch up"},
		{name: "a voter that has not published itself yet and is healthy by its /health lets the next member be created",
			w: healthyWorld(3, wantReplicas(4), unpublished("m2", nil, true)), kind: createJoiner},
		{name: "a voter that has not published itself and fails its /health holds the next member",
			w: healthyWorld(3, wantReplicas(4), unpublished("m2", etcd.ErrNotHealthy, false)), kind: 0, progress: "ready voter"},
		{name: "a voter that served once and then stopped answering holds the next member, whatever its /health",
			w:    healthyWorld(3, wantReplicas(4), unpublished("m2", nil, true), func(w *world) { member(w, "m2").Status.Version = "3.6.16" }),
			kind: 0, progress: "ready voter"},
		{name: "a voter whose etcd has run longer than etcd's publish retries without answering holds the next member, whatever its /health",
			w: healthyWorld(3, wantReplicas(4), unpublished("m2", nil, true), func(w *world) {
				w.pods["m2"].Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(w.now.Add(-time.Minute))
			}), kind: 0, progress: "has not served clients in the 1m0s since it started"},
		{name: "a voter that has not published itself yet is never dialled",
			w: healthyWorld(3, unpublished("m2", nil, true)), kind: 0,
			check: func(t *testing.T, p plan) {
				w := healthyWorld(3, unpublished("m2", nil, true))
				if !w.healthy(member(w, "m2")) {
					t.Error("m2 does not count as healthy")
				}
				for _, m := range dialVoters(w) {
					if m.Name == "m2" {
						t.Error("m2 would be dialled")
					}
				}
			}},
	})
}

// The chaining rules: which change may follow which in one pass.
func TestMayFollow(t *testing.T) {
	removal := &change{kind: deleteMember, thenRemove: true}
	for _, tc := range []struct {
		name    string
		prev    *change
		removed bool
		next    *change
		want    bool
	}{
		{"a changed spec's latch, then its first removal", &change{kind: latchStatus, reason: conditions.ReasonSpecChanged}, false, removal, true},
		{"a changed spec's latch, then a replacement's deletion", &change{kind: latchStatus, reason: conditions.ReasonSpecChanged}, false, &change{kind: deleteMember}, false},
		{"a changed spec's latch, then a restart", &change{kind: latchStatus, reason: conditions.ReasonSpecChanged}, false, &change{kind: restart}, false},
		{"the first target's latch, then the seed", &change{kind: latchStatus, reason: conditions.ReasonInitialSnapshot}, false, &change{kind: createSeed}, true},
		{"the first target's latch, then a removal", &change{kind: latchStatus, reason: conditions.ReasonInitialSnapshot}, false, removal, false},
		{"a removal etcd confirmed, then the next", removal, true, removal, true},
		{"a removal that moved the leadership", removal, false, removal, false},
		{"a removal, then a learner's add", removal, true, &change{kind: addLearner}, false},
		{"nothing next", removal, true, nil, false},
	} {
		if got := mayFollow(tc.prev, tc.removed, tc.next); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}

// A member that is unhealthy while nothing rolls is not reported as a
// roll-out waiting for it (a crash-looping member showed
// Progressing=RollingOut though no member was being restarted); during a
// roll-out, the next restart still waits for it.
func TestUnhealthyMemberIsNoRollOut(t *testing.T) {
	p := decide(healthyWorld(3, podNotReady("m1")))
	if p.progress.reason == conditions.ReasonRollingOut {
		t.Errorf("nothing rolls, yet the plan says %s: %s", p.progress.reason, p.progress.message)
	}
	rolling := func(w *world) {
		w.cluster.Status.LastRollOut = &v1alpha2.RollOutStatus{Cause: v1alpha2.RollOutCauseSpec, StartTime: metav1.NewTime(t0.Add(-time.Minute)),
			Restarted: []string{"m0"}}
	}
	p = decide(healthyWorld(3, podNotReady("m1"), rolling))
	if p.change != nil || p.progress.reason != conditions.ReasonRollingOut {
		t.Errorf("a roll-out in flight went on past an unhealthy member: %+v (%s)", p.change, p.progress.reason)
	}
}
