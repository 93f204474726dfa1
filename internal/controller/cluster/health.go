package cluster

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/etcdhealth"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/quorum"
)

// What "healthy" means. Every decision that can cost quorum (restart a
// member, remove one, promote a learner) counts only the voters that are
// healthy by etcd's own report, read fresh in the same pass (observe.go):
//
//   - the member's etcd answers its Status call;
//   - it reports the same leader as the leader reports of itself, in the
//     same raft term (a member cut off from its peers reports no leader, or
//     an older term);
//   - its applied index is within etcdhealth.MaxAppliedLag entries of the
//     leader's (package etcdhealth holds these etcd-side rules);
//   - its Pod exists, is not terminating, is the Pod the member controller
//     recorded (same UID) and is Ready (the readiness probe asks etcd's
//     /health, which needs a leader and a linearizable read);
//   - the member is not Lost and not dormant.
//
// One exception to the first rule: etcd serves a member's client port only
// once the member knows it has published itself through raft. A learner
// that caught up from the leader's snapshot often misses its first publish
// (the snapshot carries it, so the member never sees its own request
// applied) and retries only after its request timeout, about 7 s, while the
// leader may already list it by name. A member whose etcd has not answered
// a status call since its Pod started (its EtcdMember records no version)
// counts as healthy when its /health, asked in the same pass, says it
// knows a leader and a linearizable read through it succeeded: etcd's own
// proof that it follows the leader in its term and has applied what the
// leader committed. It is never dialled (dialVoters), it is not in
// readyMembers, and it joins the client Service only once it answers (the
// member controller's voter label). A member that answered once and then
// stopped answering gets no such exception, nor does one whose etcd has run
// for longer than startingGrace without answering (its client port or its
// certificates are broken, not late).
//
// The member controller's Ready condition is never consulted for this: it
// is cached, and as old as that controller's last pass.

// health says whether a member counts as healthy now, and why not.
func (w *world) health(m *v1alpha2.EtcdMember) (bool, string) {
	if why := w.podProblem(m); why != "" {
		return false, why
	}
	return w.etcdHealth(m)
}

// podProblem says why the member's Pod cannot be relied on, or "".
func (w *world) podProblem(m *v1alpha2.EtcdMember) string {
	switch {
	case m.Spec.Dormant:
		return "dormant"
	case lost(m):
		return "lost"
	}
	pod := w.pods[m.Name]
	switch {
	case pod == nil:
		return "no Pod"
	case pod.DeletionTimestamp != nil:
		return "its Pod is terminating"
	case m.Status.PodUID != "" && string(pod.UID) != m.Status.PodUID:
		return "its Pod was replaced and is not observed yet"
	case !podReady(pod):
		return "its Pod is not Ready"
	}
	return ""
}

// etcdHealth judges the member by what etcd reported in this pass.
func (w *world) etcdHealth(m *v1alpha2.EtcdMember) (bool, string) {
	if st := w.etcd.status[m.Name]; st == nil && w.etcd.statusErr[m.Name] != nil {
		if ok, why := w.starting(m); ok {
			return true, ""
		} else if why != "" {
			return false, why
		}
		return false, "etcd does not answer: " + w.etcd.statusErr[m.Name].Error()
	}
	ref, _ := w.reference()
	return etcdhealth.Judge(w.etcd.status[m.Name], ref)
}

// reference is what members are judged against: the leader's own report,
// or, when the leader did not answer (inferred), the leader the members
// that answered follow (etcdhealth.Reference).
func (w *world) reference() (ref *etcd.Status, inferred bool) {
	if w.etcd.leader != nil {
		return w.etcd.leader, false
	}
	return etcdhealth.Reference(w.etcd.status)
}

// starting reports whether a member that did not answer its Status call
// is one whose etcd has not served clients since its Pod started and is
// healthy by its /health in this pass (see the top of this file). When it
// has not served yet and is not healthy, why says so; a member that served
// before gets neither.
func (w *world) starting(m *v1alpha2.EtcdMember) (bool, string) {
	herr, asked := w.etcd.health[m.Name]
	silent, never := w.unansweredFor(m)
	switch {
	case !asked || !never || w.etcdMemberOf(m) == nil:
		return false, ""
	case silent > startingGrace:
		return false, fmt.Sprintf("its etcd has not served clients in the %s since it started", silent.Truncate(time.Second))
	case herr != nil:
		return false, "its etcd does not serve clients yet (it has not published itself), and its /health fails: " + herr.Error()
	case w.etcd.leader == nil:
		return false, "its etcd does not serve clients yet (it has not published itself), and no member that answers leads"
	}
	return true, ""
}

// startingGrace is how long after its start a member that does not serve
// clients yet may count as healthy on its /health: several of etcd's publish
// retries (each after its request timeout, 7 s with the default election
// timeout).
const startingGrace = 30 * time.Second

// unansweredFor says whether the member's etcd runs and has never answered
// a status call since its Pod started (its EtcdMember records no version),
// and for how long it has run so.
func (w *world) unansweredFor(m *v1alpha2.EtcdMember) (time.Duration, bool) {
	if m.Status.Version != "" || w.pods[m.Name] == nil {
		return 0, false
	}
	for _, cs := range w.pods[m.Name].Status.ContainerStatuses {
		if cs.Name == manifest.EtcdContainer && cs.State.Running != nil {
			return w.now.Sub(cs.State.Running.StartedAt.Time), true
		}
	}
	return 0, false
}

// mayBeStarting says whether the member could count as starting (see the
// top of this file), so that its /health is worth asking when it does not
// answer its Status call.
func (w *world) mayBeStarting(m *v1alpha2.EtcdMember) bool {
	pod := w.pods[m.Name]
	silent, never := w.unansweredFor(m)
	return never && silent <= startingGrace && pod.DeletionTimestamp == nil && podReady(pod)
}

// serves reports whether the member is healthy and answered its Status
// call in this pass: one still starting counts as healthy but serves no
// client call yet.
func (w *world) serves(m *v1alpha2.EtcdMember) bool {
	return w.healthy(m) && w.etcd.status[m.Name] != nil
}

// healthy reports whether the member counts towards quorum now.
func (w *world) healthy(m *v1alpha2.EtcdMember) bool {
	ok, _ := w.health(m)
	return ok
}

// caughtUp reports whether a learner may be promoted: it follows the
// leader in its term and has applied at least 90% of the leader's log (etcd's
// own bar for a promotion).
func (w *world) caughtUp(m *v1alpha2.EtcdMember) (bool, string) {
	if why := w.podProblem(m); why != "" {
		return false, why
	}
	st, lead := w.etcd.status[m.Name], w.etcd.leader
	if ok, why := w.starting(m); st == nil && ok {
		// Its /health is fresh proof that it follows the leader; whether
		// its log is close enough is etcd's own promotion check, which
		// refuses a learner that is not (etcd.ErrLearnerNotReady: a wait).
		return true, ""
	} else if st == nil && why != "" {
		return false, why
	}
	switch {
	case st == nil || lead == nil:
		return false, "its progress is unknown"
	case st.Leader != lead.MemberID || st.RaftTerm != lead.RaftTerm:
		return false, "it does not follow the leader"
	case st.RaftAppliedIndex*10 < lead.RaftAppliedIndex*9:
		return false, fmt.Sprintf("it has applied %d of the leader's %d entries", st.RaftAppliedIndex, lead.RaftAppliedIndex)
	}
	return true, ""
}

// voters lists etcd's voters with their health: the one projection every
// membership decision uses. A voter no EtcdMember accounts for counts as
// unhealthy. When etcd's membership could not be read, the members' recorded
// voter flag stands in (and health still needs etcd's fresh report).
func (w *world) voters() []quorum.Voter {
	var out []quorum.Voter
	if w.etcd.list == nil {
		for _, m := range w.members {
			if m.Status.IsVoter && !m.Spec.Dormant {
				ok, why := w.health(m)
				out = append(out, quorum.Voter{Name: m.Name, Healthy: ok, Why: why})
			}
		}
		return out
	}
	for _, em := range w.etcd.list.Members {
		if em.IsLearner {
			continue
		}
		m := w.memberOf(em)
		if m == nil {
			out = append(out, quorum.Voter{Name: strangerName(em), Why: "no EtcdMember accounts for it"})
			continue
		}
		ok, why := w.health(m)
		out = append(out, quorum.Voter{Name: m.Name, Healthy: ok, Why: why})
	}
	return out
}

// healthyVoters counts the running voters healthy now that serve clients
// (one still starting does not).
func (w *world) healthyVoters() int {
	n := 0
	for _, m := range w.running() {
		if w.isVoter(m) && w.serves(m) {
			n++
		}
	}
	return n
}

// alarms are the alarms the leader (or any member that answered) reports.
func (w *world) alarms() []string {
	if w.etcd.leader != nil {
		return w.etcd.leader.Alarms()
	}
	for _, st := range w.etcd.status {
		if a := st.Alarms(); len(a) > 0 {
			return a
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
