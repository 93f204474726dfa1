// Package quorum decides whether a membership change or a member restart keeps
// an etcd cluster able to commit. Every function is pure: it takes the voters
// and their health now, projects the voting membership after the change, and
// counts only members that are healthy now and stay.
package quorum

import (
	"fmt"
	"strings"
)

// Voter is one voting member and whether it is healthy right now, with why
// not when it is not.
type Voter struct {
	Name    string
	Healthy bool
	Why     string
}

// Decision is a verdict with the reason behind it, phrased for a condition
// message or an Event.
type Decision struct {
	OK     bool
	Reason string
}

// Size is the number of voters that make a quorum of n voters.
func Size(n int) int { return n/2 + 1 }

func healthy(voters []Voter, except string) int {
	n := 0
	for _, v := range voters {
		if v.Healthy && v.Name != except {
			n++
		}
	}
	return n
}

// unhealthy names the voters that do not count, other than except, and why.
func unhealthy(voters []Voter, except string) string {
	var out []string
	for _, v := range voters {
		if !v.Healthy && v.Name != except {
			if v.Why != "" {
				out = append(out, v.Name+": "+v.Why)
			} else {
				out = append(out, v.Name)
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

func find(voters []Voter, name string) (Voter, bool) {
	for _, v := range voters {
		if v.Name == name {
			return v, true
		}
	}
	return Voter{}, false
}

// Now reports whether the cluster has a quorum at all.
func Now(voters []Voter) Decision {
	h, need := healthy(voters, ""), Size(len(voters))
	if len(voters) == 0 || h < need {
		return Decision{false, fmt.Sprintf("only %d of %d voters are healthy, %d needed for quorum%s", h, len(voters), need, unhealthy(voters, ""))}
	}
	return Decision{true, fmt.Sprintf("%d of %d voters are healthy", h, len(voters))}
}

// AddLearner: a learner does not vote, so the voters stay; the change itself
// must still be committed by a quorum of them.
func AddLearner(voters []Voter) Decision {
	d := Now(voters)
	if !d.OK {
		d.Reason = "cannot add a member: " + d.Reason
	}
	return d
}

// Promote: the learner joins the voters and counts as healthy only if it has
// caught up with the leader.
func Promote(voters []Voter, learner string, caughtUp bool) Decision {
	after := append(append([]Voter(nil), voters...), Voter{Name: learner, Healthy: caughtUp})
	h, need := healthy(after, ""), Size(len(after))
	if h < need {
		return Decision{false, fmt.Sprintf("cannot promote %s: %d of %d voters would be healthy, %d needed%s", learner, h, len(after), need, unhealthy(voters, ""))}
	}
	return Decision{true, fmt.Sprintf("promoting %s leaves %d of %d voters healthy", learner, h, len(after))}
}

// Remove: the member leaves (counts as gone). The change itself must be
// committed by a quorum of the voters as they are now, and the voters that
// stay must make a quorum of their own.
func Remove(voters []Voter, name string) Decision {
	if d := Now(voters); !d.OK {
		d.Reason = fmt.Sprintf("cannot remove %s: %s to commit the change", name, d.Reason)
		return d
	}
	if _, isVoter := find(voters, name); !isVoter {
		return Decision{true, fmt.Sprintf("%s is not a voter", name)}
	}
	if len(voters) == 1 {
		return Decision{false, fmt.Sprintf("cannot remove %s: it is the last voter", name)}
	}
	remaining := len(voters) - 1
	h, need := healthy(voters, name), Size(remaining)
	if h < need {
		return Decision{false, fmt.Sprintf("cannot remove %s: %d of the remaining %d voters are healthy, %d needed%s", name, h, remaining, need, unhealthy(voters, name))}
	}
	return Decision{true, fmt.Sprintf("removing %s leaves %d of %d voters healthy", name, h, remaining)}
}

// Restart: the member stays a voter but is down while it restarts.
func Restart(voters []Voter, name string) Decision {
	h, need := healthy(voters, name), Size(len(voters))
	if h < need {
		return Decision{false, fmt.Sprintf("cannot restart %s: %d of %d voters would stay healthy, %d needed%s", name, h, len(voters), need, unhealthy(voters, name))}
	}
	return Decision{true, fmt.Sprintf("restarting %s leaves %d of %d voters healthy", name, h, len(voters))}
}
