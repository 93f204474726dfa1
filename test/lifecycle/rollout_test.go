package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// Roll-outs (issue 14): a changed version, options, resources or scheduling
// reaches running members one at a time, keeping their identity.

func withVersion(v string) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) { c.Spec.Version = v }
}

func (h *harness) editSpec(name string, edit func(*v1alpha2.EtcdClusterSpec)) {
	h.t.Helper()
	c := h.getCluster(name)
	patch := client.MergeFrom(c.DeepCopy())
	edit(&c.Spec)
	c.Generation++
	if err := h.c.Patch(context.Background(), c, patch); err != nil {
		h.t.Fatal(err)
	}
}

// identities maps member names to their etcd member IDs.
func (h *harness) identities(cluster string) map[string]string {
	out := map[string]string{}
	for _, m := range h.members(cluster) {
		out[m.Name] = m.Status.MemberID
	}
	return out
}

// runRoll steps until converged, checking at every step that no more than
// one member is down, and counts the Pods each member had.
func (h *harness) runRoll(what, cluster string, want int) map[string]int {
	h.t.Helper()
	pods := map[string]map[string]bool{}
	seen := func() {
		list := &corev1.PodList{}
		_ = h.raw.List(context.Background(), list)
		for _, p := range list.Items {
			if pods[p.Name] == nil {
				pods[p.Name] = map[string]bool{}
			}
			pods[p.Name][string(p.UID)] = true
		}
	}
	h.run(what, func() bool {
		seen()
		down := 0
		for _, m := range h.etcd.Members() {
			if running, leader := h.etcd.Running(m.PeerURLs[0]); !running || !leader {
				down++
			}
		}
		if down > 1 {
			h.t.Errorf("%d members down at once during the roll-out", down)
		}
		return h.converged(cluster, want)()
	})
	out := map[string]int{}
	for name, uids := range pods {
		out[name] = len(uids)
	}
	return out
}

func TestRollingUpgradeKeepsIdentityOneAtATime(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.5.35"))
	h.run("3", h.converged("c", 3))
	before := h.identities("c")
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
	restarts := h.runRoll("upgrade", "c", 3)
	if got := h.identities("c"); !mapsEqual(got, before) {
		t.Errorf("members changed identity: %v, was %v", got, before)
	}
	for name, n := range restarts {
		if n != 2 {
			t.Errorf("member %s had %d Pods; a roll restarts each once", name, n)
		}
	}
	for _, m := range h.members("c") {
		if m.Spec.Version != "3.6.16" || m.Status.Version != "3.6.16" {
			t.Errorf("member %s: spec %s, runs %s", m.Name, m.Spec.Version, m.Status.Version)
		}
	}
	if v := h.etcd.ClusterVersion(); v != "3.6" || h.getCluster("c").Status.ClusterVersion != "3.6" {
		t.Errorf("cluster version %s (status %s), want 3.6", v, h.getCluster("c").Status.ClusterVersion)
	}
	if got := h.getCluster("c").Status.UpdatedMembers; got != 3 {
		t.Errorf("updatedMembers = %d", got)
	}
	// The leader went last, after handing over.
	if !slices.ContainsFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "move-leader ") && !strings.Contains(c, "refused") }) {
		t.Errorf("the leader was restarted without handing over: %q", h.calls)
	}
}

// A cluster born on 3.5 goes to 3.6 and then 3.7: before 3.7 each member
// restarts once on 3.6 with --snapshot-count=1, or 3.7 could not replay the
// 3.5-era entries of its log (the fake etcd refuses to start it, as etcd
// panics).
func TestUpgradeThroughEveryMinor(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.5.35"))
	h.run("3", h.converged("c", 3))
	before := h.identities("c")
	for _, v := range []string{"3.6.16", "3.7.3"} {
		h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = v })
		h.runRoll("to "+v, "c", 3)
	}
	if got := h.identities("c"); !mapsEqual(got, before) {
		t.Errorf("members changed identity: %v, was %v", got, before)
	}
	for name, n := range h.incarnations() {
		// The first Pod, one for 3.6, one to snapshot, one for 3.7.
		if n != 4 {
			t.Errorf("member %s had %d Pods, want 4", name, n)
		}
	}
	for _, m := range h.members("c") {
		if _, left := m.Annotations["etcd-operator.cozystack.io/snapshot-count"]; left || m.Status.Version != "3.7.3" {
			t.Errorf("member %s: runs %s, annotations %v", m.Name, m.Status.Version, m.Annotations)
		}
	}
}

func TestSkippedMinorIsRefusedBeforeAnyMemberIsTouched(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.5.35"))
	h.run("3", h.converged("c", 3))
	pods := h.podUIDs()
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.7.3" })
	h.steps(15)
	p := progressing(h, "c")
	if p == nil || p.Reason != conditions.ReasonVersionChangeRefused || !strings.Contains(p.Message, "skips a minor") {
		t.Fatalf("Progressing = %+v", p)
	}
	if got := h.podUIDs(); !slices.Equal(got, pods) {
		t.Errorf("Pods were restarted for a refused version: %v, was %v", got, pods)
	}
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
	h.runRoll("the allowed step", "c", 3)
}

func TestMinorDowngradeThroughEtcdsDowngradeAPI(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.7.3"))
	h.run("3", h.converged("c", 3))
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
	h.runRoll("downgrade", "c", 3)
	if v := h.etcd.ClusterVersion(); v != "3.6" {
		t.Errorf("cluster version %s after the downgrade, want 3.6", v)
	}
}

func TestOptionsAndResourcesRollOut(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) {
		s.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](512 << 20)}
		s.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}
	})
	h.runRoll("roll", "c", 3)
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list)
	for _, p := range list.Items {
		if !slices.Contains(p.Spec.Containers[0].Command, "--quota-backend-bytes=536870912") ||
			p.Spec.Containers[0].Resources.Requests.Cpu().String() != "200m" {
			t.Errorf("pod %s runs %v with %v", p.Name, p.Spec.Containers[0].Command, p.Spec.Containers[0].Resources.Requests)
		}
	}
}

// A member that does not come back on the new version stops the roll with
// Degraded naming it; the others keep running the old one; setting the old
// version back brings the stuck member back.
func TestStuckRollStopsAndRollsBack(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.5.35"), withDeadline(30))
	h.run("3", h.converged("c", 3))
	h.breakAll = true
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
	h.run("stuck", func() bool {
		d := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason == conditions.ReasonRollOutStuck
	})
	stale := 0
	for _, m := range h.members("c") {
		if m.Spec.Version == "3.5.35" {
			stale++
		}
	}
	if stale != 2 {
		t.Fatalf("%d members still on the old version, want 2: the roll went on past a stuck member\n%s", stale, h.dump())
	}
	h.breakAll = false
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.5.35" })
	h.runRoll("rolled back", "c", 3)
	for _, m := range h.members("c") {
		if m.Status.Version != "3.5.35" {
			t.Errorf("member %s runs %s after the roll back", m.Name, m.Status.Version)
		}
	}
}

func TestMemoryMembersRollByReplacement(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: mustQuantity("256Mi")}
	})
	h.run("3", h.converged("c", 3))
	before := h.identities("c")
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.15" })
	h.run("replaced", h.converged("c", 3))
	for name := range before {
		if _, still := h.identities("c")[name]; still {
			t.Errorf("memory-backed member %s was restarted in place; its data would be gone", name)
		}
	}
}

func (h *harness) podUIDs() []string {
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list)
	var out []string
	for _, p := range list.Items {
		out = append(out, string(p.UID))
	}
	slices.Sort(out)
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The leader goes last; if it does not come back, the roll is reported stuck
// (not done) although every member's spec is up to date.
func TestStuckLastMemberIsReported(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3, withVersion("3.5.35"), withDeadline(30))
	h.run("3", h.converged("c", 3))
	for _, m := range h.members("c") {
		if id, _ := etcd.ParseID(m.Status.MemberID); id == h.etcd.Leader() {
			h.broken[m.Name] = true
		}
	}
	h.editSpec("c", func(s *v1alpha2.EtcdClusterSpec) { s.Version = "3.6.16" })
	h.run("stuck on the last member", func() bool {
		d := conditions.Get(h.getCluster("c").Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason == conditions.ReasonRollOutStuck
	})
	if p := progressing(h, "c"); p.Reason == conditions.ReasonReconciled {
		t.Fatalf("the roll counts as done with a member down: %+v", p)
	}
}
