package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

const tokenReplayNS = "e2e-tokenreplay"

func init() { suiteNamespaces = append(suiteNamespaces, tokenReplayNS) }

// TestSpentRecoveryTokenStartsNothing replays a recovery token (issue 41,
// claim 2: a token left on the cluster after a NotNeeded answer later ran
// the recovery by itself, and 12 acknowledged writes were lost). Two of
// three members are cut off the network, so the quorum is lost for real; a
// dry run plans a recovery; the members come back, and the plan's token,
// given now, is answered NotNeeded and void. The quorum is lost again with
// the token still in the annotation and kept so for over a minute: no
// recovery runs (no member fenced, marked or given a new ID). Once the
// members are back, every write acknowledged before, between and after the
// losses is there, and the history is linearizable.
func TestSpentRecoveryTokenStartsNothing(t *testing.T) {
	t.Parallel()
	ns := namespace(t, tokenReplayNS)
	const name = "replay"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 10, time.Minute)
	ms := members(t, ns, name)
	cut := []string{ms[1].Name, ms[2].Name}
	watch := watchCluster(t, ns, name, identityKept(t, ns, name), noSurvivorMark, noRecoveryRuns)

	w.mark("first loss")
	lose := partitionMembers(t, ns, cut)
	waitQuorumLost(t, ns, name)
	annotateRecover(t, ns, name, manifest.RecoverDryRun)
	plan := waitRecoveryAnswer(t, ns, name, manifest.RecoverDryRun, v1alpha2.RecoveryPlanned)
	token := plan.Token
	w.mark("back")
	lose.heal()
	w.requireWritesAfter("back", 10, 3*time.Minute)

	annotateRecover(t, ns, name, token)
	rec := waitRecoveryAnswer(t, ns, name, token, v1alpha2.RecoveryNotNeeded)
	if !strings.Contains(rec.Message, "void") {
		t.Errorf("the NotNeeded answer to the token does not say it is void: %s", rec.Message)
	}
	waitReconciled(t, ns, name, 3, 3*time.Minute)

	w.mark("second loss")
	lose = partitionMembers(t, ns, cut)
	waitQuorumLost(t, ns, name)
	lostAt := time.Now()
	// A minute and more of quorum loss with the spent token in the
	// annotation: three times the grace, and time for any plan the
	// operator makes meanwhile to be answered and acted on.
	consistently(t, 70*time.Second, "no recovery runs on the spent token", func() (bool, string) {
		if ok, seen := watch.clean(); !ok {
			return false, seen
		}
		c := getCluster(t, ns, name)
		if got := c.Annotations[manifest.AnnotationRecover]; got != token {
			return false, fmt.Sprintf("the annotation holds %q, not the spent token", got)
		}
		if r := c.Status.Recovery; r != nil && r.Phase == v1alpha2.RecoveryPlanned && r.Token == token {
			return false, "the spent token is planned again"
		}
		return true, ""
	})
	if r := getCluster(t, ns, name).Status.Recovery; r != nil {
		t.Logf("recovery record %s after the second loss: %s: %s", time.Since(lostAt).Round(time.Second), r.Phase, r.Message)
	}
	w.mark("healed")
	healAt := time.Now()
	lose.heal()
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	watch.check(t)
	t.Logf("seen: %s", watch.seen())
	t.Logf("spent token: longest write stall %s in the first loss, %s in the second; writes served again %s after the heal",
		w.longestStall("first loss", "back").Round(time.Millisecond), w.longestStall("second loss", "healed").Round(time.Millisecond),
		w.firstAckAfter("healed").Sub(healAt).Round(time.Millisecond))
	w.verify("healed")
}

// partitioned are members cut off the network, each alone.
type partitioned struct {
	t      *testing.T
	ns     string
	pods   []string
	healed bool
}

// partitionMembers cuts each member's Pod off the network; the cut is
// lifted by heal, or when the test ends.
func partitionMembers(t *testing.T, ns string, names []string) *partitioned {
	t.Helper()
	p := &partitioned{t: t, ns: ns, pods: names}
	t.Cleanup(func() {
		if !p.healed {
			for _, n := range p.pods {
				_ = sb.Heal(context.Background(), ns, n)
			}
		}
	})
	for _, n := range names {
		if err := sb.Partition(context.Background(), ns, n); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *partitioned) heal() {
	p.t.Helper()
	p.healed = true
	for _, n := range p.pods {
		if err := sb.Heal(context.Background(), p.ns, n); err != nil {
			p.t.Fatal(err)
		}
	}
}

// waitQuorumLost waits until the cluster reports its quorum lost.
func waitQuorumLost(t *testing.T, ns, name string) {
	t.Helper()
	start := time.Now()
	eventually(t, 3*time.Minute, "quorum loss reported", func() (bool, string) {
		c := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Available)
		return c != nil && c.Reason == conditions.ReasonQuorumLost, condString(c)
	})
	t.Logf("quorum loss reported %s after the cut", time.Since(start).Round(time.Second))
}
