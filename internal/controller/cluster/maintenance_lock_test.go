package cluster

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// The maintenance lock's decisions: which change it holds back, when it is
// in force, and when a pass grants it.

// asking adds an EtcdDefrag "d" that asks for member at since.
func asking(member string, since time.Time, mods ...func(*v1alpha2.EtcdDefrag)) func(*world) {
	return func(w *world) {
		d := &v1alpha2.EtcdDefrag{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
		d.Spec.ClusterRef.Name = "c"
		d.Status.Phase = v1alpha2.DefragRunning
		d.Status.Defragmenting = &v1alpha2.DefragRequest{Member: member, Since: metav1.NewTime(since)}
		for _, m := range mods {
			m(d)
		}
		w.defrags = append(w.defrags, d)
	}
}

// locked records a lock for d and member, asked at since, granted at
// granted.
func locked(member string, since, granted time.Time) func(*world) {
	return func(w *world) {
		w.cluster.Status.MaintenanceLock = &v1alpha2.MaintenanceLock{Holder: "d", Member: member, RequestedAt: metav1.NewTime(since),
			GrantedAt: metav1.NewTime(granted), ExpiresAt: metav1.NewTime(granted.Add(lockLifetime))}
	}
}

func atRestNow(w *world) {
	w.cluster.Status.Conditions = []metav1.Condition{{Type: conditions.Progressing, Status: metav1.ConditionFalse, Reason: conditions.ReasonReconciled, ObservedGeneration: w.cluster.Generation}}
}

func TestHeldLock(t *testing.T) {
	asked := t0.Add(-10 * time.Second)
	for _, tc := range []struct {
		name string
		mods []func(*world)
		held bool
	}{
		{"none", nil, false},
		{"granted and asked for", []func(*world){asking("m1", asked), locked("m1", asked, asked)}, true},
		{"expired", []func(*world){asking("m1", asked), locked("m1", asked, t0.Add(-lockLifetime))}, false},
		{"the run moved on to another member", []func(*world){asking("m2", t0), locked("m1", asked, asked)}, false},
		{"the run asks again", []func(*world){asking("m1", t0), locked("m1", asked, asked)}, false},
		{"the run withdrew", []func(*world){asking("m1", asked, func(d *v1alpha2.EtcdDefrag) { d.Status.Defragmenting = nil }), locked("m1", asked, asked)}, false},
		{"the run finished", []func(*world){asking("m1", asked, func(d *v1alpha2.EtcdDefrag) { d.Status.Phase = v1alpha2.DefragComplete }), locked("m1", asked, asked)}, false},
		// Its call may still be in progress: the lock holds until it expires.
		{"the run is gone", []func(*world){locked("m1", asked, asked)}, true},
		{"the runs cannot be listed", []func(*world){locked("m1", asked, asked), func(w *world) { w.defragsUnknown = true }}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := heldLock(healthyWorld(3, tc.mods...)) != nil; got != tc.held {
				t.Errorf("held = %t, want %t", got, tc.held)
			}
		})
	}
}

// While the lock is held, a disruptive change waits, saying why, until the
// lock's expiry; a change that blocks no member goes on.
func TestPlanHeldBackByTheLock(t *testing.T) {
	asked := t0.Add(-10 * time.Second)
	hold := []func(*world){asking("m1", asked), locked("m1", asked, asked)}
	for _, tc := range []struct {
		name   string
		mods   []func(*world)
		change string
	}{
		{"a roll-out's restart", []func(*world){wantVersion("3.6.17")}, ""},
		{"a scale-down's removal", []func(*world){wantReplicas(1)}, ""},
		{"a learner's promotion", []func(*world){learner("m3", 1000), wantReplicas(4)}, ""},
		{"a scale-up creates the member", []func(*world){wantReplicas(5)}, "createJoiner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free := decide(healthyWorld(3, tc.mods...))
			if free.change == nil || tc.change == "" && !disruptive(free.change.kind) {
				t.Fatalf("without the lock the plan is %+v", free.change)
			}
			p := decide(healthyWorld(3, append(tc.mods, hold...)...))
			switch {
			case tc.change != "":
				if p.change == nil || p.change.kind.String() != tc.change {
					t.Errorf("under the lock the plan is %+v, want %s", p.change, tc.change)
				}
			case p.change != nil:
				t.Errorf("under the lock the plan makes %s", p.change.kind)
			case p.progress.reason != conditions.ReasonWaitingForDefrag || !strings.Contains(p.progress.message, "member m1 is being defragmented by EtcdDefrag d"):
				t.Errorf("progress %+v", p.progress)
			case p.requeue != lockLifetime-10*time.Second:
				t.Errorf("requeue %s, want the lock's expiry", p.requeue)
			}
		})
	}
}

// A pass grants the lock only at rest and with nothing to change, to the
// request of a running member made within the request window.
func TestNextLock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mods  []func(*world)
		p     plan
		grant bool
	}{
		{"at rest", []func(*world){atRestNow, asking("m1", t0)}, plan{}, true},
		{"nobody asks", []func(*world){atRestNow}, plan{}, false},
		{"a change this pass", []func(*world){atRestNow, asking("m1", t0)}, plan{change: &change{kind: recordJoined}}, false},
		{"a refusal this pass", []func(*world){atRestNow, asking("m1", t0)}, plan{refused: []refusal{{message: "no"}}}, false},
		{"not at rest", []func(*world){asking("m1", t0)}, plan{}, false},
		{"behind its spec", []func(*world){atRestNow, asking("m1", t0), func(w *world) { w.cluster.Generation++ }}, plan{}, false},
		{"a stale request", []func(*world){atRestNow, asking("m1", t0.Add(-requestWindow))}, plan{}, false},
		{"a member that does not run", []func(*world){atRestNow, asking("m9", t0)}, plan{}, false},
		{"a finished run", []func(*world){atRestNow, asking("m1", t0, func(d *v1alpha2.EtcdDefrag) { d.Status.Phase = v1alpha2.DefragFailed })}, plan{}, false},
		{"the runs cannot be listed", []func(*world){atRestNow, asking("m1", t0), func(w *world) { w.defragsUnknown = true }}, plan{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := healthyWorld(3, tc.mods...)
			l := nextLock(w, tc.p)
			if (l != nil) != tc.grant {
				t.Fatalf("lock %+v, want granted %t", l, tc.grant)
			}
			if l != nil && (l.Holder != "d" || l.Member != "m1" || !l.RequestedAt.Time.Equal(t0) || !l.ExpiresAt.Time.Equal(t0.Add(lockLifetime))) {
				t.Errorf("lock %+v", l)
			}
		})
	}
}

// A lock held stays as it is; an expired one is not granted again to the
// same request (its run may have died holding it).
func TestNextLockKeepsAndExpires(t *testing.T) {
	asked := t0.Add(-10 * time.Second)
	w := healthyWorld(3, atRestNow, asking("m1", asked), locked("m1", asked, asked))
	if l := nextLock(w, plan{}); l != w.cluster.Status.MaintenanceLock {
		t.Errorf("the held lock became %+v", l)
	}
	w = healthyWorld(3, atRestNow, asking("m1", asked), locked("m1", asked, asked))
	w.now = asked.Add(lockLifetime)
	if l := nextLock(w, plan{}); l != nil {
		t.Errorf("an expired lock was granted again: %+v", l)
	}
}

func TestDisruptive(t *testing.T) {
	for _, k := range []changeKind{addLearner, promote, removeFromEtcd, removeStray, deleteMember, setDormant, restart, forceNewCluster} {
		if !disruptive(k) {
			t.Errorf("%s is not disruptive", k)
		}
	}
	for _, k := range []changeKind{latchStatus, createSeed, completeSeed, createJoiner, recordJoined, release, wake, completeRollOut, enableDowngrade, cancelDowngrade, enableAuth, clearForce} {
		if disruptive(k) {
			t.Errorf("%s is disruptive", k)
		}
	}
}
