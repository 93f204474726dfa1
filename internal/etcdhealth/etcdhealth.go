// Package etcdhealth is what "healthy" means by etcd's own report, shared
// by every controller that must not act on an unhealthy cluster: the
// cluster controller before a membership change or a restart, the defrag
// controller between two members. Each reads the Status of every member
// fresh, in the same pass, and judges each report against the leader's.
package etcdhealth

import (
	"fmt"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// MaxAppliedLag is how many raft entries a voter may trail the leader's
// applied index and still count as caught up. A follower serving a busy
// cluster trails by a few entries; one restoring a snapshot or cut off
// trails by thousands.
const MaxAppliedLag = 1000

// LeaderOf picks the leader's own report: a member that says it leads, in
// the highest term any such member reports; nil when none does.
func LeaderOf[K comparable](statuses map[K]*etcd.Status) *etcd.Status {
	var lead *etcd.Status
	for _, st := range statuses {
		if st != nil && st.Leader != 0 && st.Leader == st.MemberID && (lead == nil || st.RaftTerm > lead.RaftTerm) {
			lead = st
		}
	}
	return lead
}

// Judge says whether a member's report shows it healthy next to the
// leader's, and why not: it follows a leader, the same one in the same term
// as the leader reports of itself (a member cut off reports none, or an
// older term), and its applied index is within MaxAppliedLag of the
// leader's.
func Judge(st, lead *etcd.Status) (bool, string) {
	switch {
	case st == nil:
		return false, "etcd was not asked"
	case lead == nil:
		return false, "no member reports a leader"
	case st.Leader == 0:
		return false, "etcd reports no leader"
	case st.Leader != lead.MemberID || st.RaftTerm != lead.RaftTerm:
		return false, fmt.Sprintf("etcd follows leader %s in term %d, the leader is %s in term %d",
			etcd.FormatID(st.Leader), st.RaftTerm, etcd.FormatID(lead.MemberID), lead.RaftTerm)
	case lead.RaftAppliedIndex > st.RaftAppliedIndex+MaxAppliedLag:
		return false, fmt.Sprintf("its applied index %d trails the leader's %d", st.RaftAppliedIndex, lead.RaftAppliedIndex)
	}
	return true, ""
}

// Reference is what the other members are judged against: the leader's
// own report, or, when the leader did not answer, the leader the members
// that answered name in the highest term any of them names one in, with
// the highest applied index among them. inferred says which: a leader the
// operator cannot reach is not a leader that is gone, and the members that
// follow it are evidence of a quorum (raft clears a follower's leader once
// an election timeout passes without hearing from it).
func Reference[K comparable](statuses map[K]*etcd.Status) (ref *etcd.Status, inferred bool) {
	if lead := LeaderOf(statuses); lead != nil {
		return lead, false
	}
	for _, st := range statuses {
		if st == nil || st.Leader == 0 {
			continue
		}
		switch {
		case ref == nil || st.RaftTerm > ref.RaftTerm:
			ref = &etcd.Status{MemberID: st.Leader, Leader: st.Leader, RaftTerm: st.RaftTerm, RaftAppliedIndex: st.RaftAppliedIndex}
		case st.RaftTerm == ref.RaftTerm && st.Leader == ref.MemberID:
			ref.RaftAppliedIndex = max(ref.RaftAppliedIndex, st.RaftAppliedIndex)
		}
	}
	return ref, ref != nil
}
