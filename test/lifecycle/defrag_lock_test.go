package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// Issue 41, claim 10: a defragmentation and a membership change or a
// member restart are mutually exclusive, through one lock in the API
// (status.maintenanceLock of the EtcdCluster). A Defragment call takes
// minutes on a large database; here it is held "in progress" (issued, not
// returned) while the rest of the operator runs step after step, and a
// scale-up or a roll-out asked for meanwhile waits for it.

// holdingClient runs during(endpoint) after its Defragment call reached
// etcd and before it returns to the defrag controller: the call is in
// progress for as long as during runs.
type holdingClient struct {
	etcd.Client
	during func(endpoint string)
}

func (c *holdingClient) Defragment(ctx context.Context, endpoint string) error {
	err := c.Client.Defragment(ctx, endpoint)
	c.during(endpoint)
	return err
}

// holdDefragments makes every Defragment call of the defrag controller
// run during before it returns.
func (h *harness) holdDefragments(during func(endpoint string)) {
	inner := h.defrag.Dial
	h.defrag.Dial = func(ctx context.Context, cfg etcd.Config) (etcd.Client, error) {
		c, err := inner(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &holdingClient{Client: c, during: during}, nil
	}
}

// stepWithoutDefrag is step() without the defrag controller, whose
// reconcile is the one holding a Defragment call (controller-runtime never
// reconciles one object twice at once).
func (h *harness) stepWithoutDefrag() {
	h.stepNo++
	h.flushDelayed()
	h.kubelet()
	h.publishEndpoints()
	h.checkRouting()
	ctx := context.Background()
	members := &v1alpha2.EtcdMemberList{}
	_ = h.c.List(ctx, members)
	for _, m := range members.Items {
		_, err := h.member.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		h.checkError("member "+m.Name, err)
	}
	clusters := &v1alpha2.EtcdClusterList{}
	_ = h.c.List(ctx, clusters)
	for _, c := range clusters.Items {
		_, err := h.cluster.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		h.checkError("cluster "+c.Name, err)
	}
	h.collectGarbage()
	h.checkInvariants(true)
	h.refreshBudgets()
	h.clock.Step(time.Second)
}

// disruptions counts what blocks or changes a member: etcd membership
// calls, Pod evictions, and the Pods of the given members (a new member
// may be created meanwhile: etcd does not know it yet).
func (h *harness) disruptions(members []v1alpha2.EtcdMember) (calls int, evictions int, pods string) {
	for _, c := range h.calls {
		for _, op := range []string{"add ", "promote ", "remove "} {
			if strings.HasPrefix(c, op) {
				calls++
			}
		}
	}
	var uids []string
	for _, m := range members {
		uids = append(uids, m.Name+"="+h.podUID(m.Name))
	}
	return calls, h.evictions, strings.Join(uids, ",")
}

// A scale-up or a roll-out asked for while a member is being defragmented
// waits, saying why, until its Defragment call returned; then both finish.
func TestDefragLockHoldsMembershipChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness)
		want   int
	}{
		{"scale up", func(h *harness) { h.setReplicas("c", 5) }, 5},
		{"roll-out", func(h *harness) {
			h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) {
				s.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("200m")}}
			})
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.createCluster("c", 3)
			h.run("3", h.converged("c", 3))
			h.fragment("c", 300*mib, 50*mib)
			held := 0
			h.holdDefragments(func(endpoint string) {
				held++
				if held == 1 {
					h.checkHeldDuringDefrag(endpoint, tc.change)
				}
			})
			h.createDefrag("d", "c")
			h.run("defrag", h.defragFinished("d"))
			if held == 0 {
				t.Fatal("no Defragment call was made")
			}
			h.run("converged", h.converged("c", tc.want))
			if d := h.getDefrag("d"); d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmented != 3 {
				t.Errorf("run ended %s with %d defragmented: %+v", d.Status.Phase, d.Status.Defragmented, checked(d))
			}
			if l := h.getCluster("c").Status.MaintenanceLock; l != nil {
				t.Errorf("the lock is left after the run: %+v", l)
			}
		})
	}
}

// checkHeldDuringDefrag asks for a change while the member at endpoint is
// being defragmented and checks that 20 steps make no membership call,
// eviction or restart, and that Progressing says why.
func (h *harness) checkHeldDuringDefrag(endpoint string, change func(*harness)) {
	t := h.t
	m, _ := h.memberAt(endpoint)
	before := h.members("c")
	calls, evictions, pods := h.disruptions(before)
	change(h)
	for range 20 {
		h.stepWithoutDefrag()
	}
	c2, e2, p2 := h.disruptions(before)
	if c2 != calls || e2 != evictions || p2 != pods {
		t.Errorf("while %s was being defragmented: membership calls %d -> %d, evictions %d -> %d, pods %s -> %s\n%s",
			m.Name, calls, c2, evictions, e2, pods, p2, h.dump())
	}
	cond := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Progressing)
	if cond == nil || cond.Reason != conditions.ReasonWaitingForDefrag || !strings.Contains(cond.Message, m.Name) {
		t.Errorf("while %s was being defragmented, Progressing is %+v", m.Name, cond)
	}
}

// A lock whose holder never comes back (its Defragment call hangs, or the
// run died holding it) holds changes back only until it expires, and is
// not granted again to the same request; the run, back, asks again and
// finishes after the change.
func TestDefragLockExpires(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.fragment("c", 300*mib, 50*mib)
	held := 0
	h.holdDefragments(func(string) {
		held++
		if held > 1 {
			return
		}
		l := h.getCluster("c").Status.MaintenanceLock
		if l == nil {
			t.Fatal("Defragment was called without the maintenance lock")
		}
		calls, _, _ := h.disruptions(nil)
		h.setReplicas("c", 5)
		for range 5 {
			h.stepWithoutDefrag()
		}
		if now, _, _ := h.disruptions(nil); now != calls {
			t.Errorf("membership calls before the lock expired: %v", h.calls)
		}
		h.clock.SetTime(l.ExpiresAt.Time)
		for i := 0; !h.converged("c", 5)(); i++ {
			if i > 200 {
				t.Fatalf("the scale-up did not go on after the lock expired:\n%s", h.dump())
			}
			h.stepWithoutDefrag()
		}
		if n := len(h.events.notes("MaintenanceLockExpired")); n != 1 {
			t.Errorf("%d MaintenanceLockExpired Events", n)
		}
		if l := h.getCluster("c").Status.MaintenanceLock; l != nil {
			t.Errorf("the expired lock was granted again: %+v", l)
		}
	})
	h.createDefrag("d", "c")
	h.run("defrag", h.defragFinished("d"))
	if d := h.getDefrag("d"); d.Status.Phase != v1alpha2.DefragComplete || d.Status.Defragmenting != nil {
		t.Errorf("run ended %s: %+v", d.Status.Phase, checked(d))
	}
	if l := h.getCluster("c").Status.MaintenanceLock; l != nil {
		t.Errorf("the lock is left after the run: %+v", l)
	}
}
