package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// upgradePath is every minor the toolchain has, from the oldest.
var upgradePath = []string{"3.5.35", "3.6.16", "3.7.3"}

// TestRollingUpgrade upgrades live clusters of 3 and 5 members through every
// minor, with a writer throughout: each member restarts once per step, keeps
// its name and etcd identity, writes go on during every step, and etcd's
// cluster version follows.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-upgrade")
	for _, n := range []int32{3, 5} {
		t.Run(fmt.Sprintf("%d members", n), func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("up%d", n)
			newCluster(t, ns, name, n, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = upgradePath[0] })
			waitReconciled(t, ns, name, int(n), 5*time.Minute)
			w := startWriter(t, ns, name)
			w.requireWritesAfter("", 5, time.Minute)
			for _, v := range upgradePath[1:] {
				stall := rollTo(t, w, ns, name, int(n), v)
				t.Logf("%d members to %s: longest write stall %s", n, v, stall.Round(time.Millisecond))
			}
			w.verify("to " + upgradePath[len(upgradePath)-1] + " done")
		})
	}
}

// rollTo sets the version, waits for the roll to finish and checks it kept
// every member's identity; it returns the longest write stall.
func rollTo(t *testing.T, w *writer, ns, name string, n int, v string) time.Duration {
	t.Helper()
	ids := memberIDs(t, ns, name)
	start, end := "to "+v, "to "+v+" done"
	w.mark(start)
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = v })
	waitReconciled(t, ns, name, n, 10*time.Minute)
	w.mark(end)
	w.requireWritesBetween(start, end, 1)
	if got := memberIDs(t, ns, name); !maps.Equal(got, ids) {
		t.Errorf("rolling to %s changed members: %v, was %v", v, got, ids)
	}
	for _, m := range members(t, ns, name) {
		if m.Status.Version != v {
			t.Errorf("member %s runs %s after the roll to %s", m.Name, m.Status.Version, v)
		}
	}
	c := getCluster(t, ns, name)
	if want := v[:strings.LastIndexByte(v, '.')]; c.Status.ClusterVersion != want || c.Status.UpdatedMembers != int32(n) {
		t.Errorf("after the roll to %s: clusterVersion %q, updatedMembers %d", v, c.Status.ClusterVersion, c.Status.UpdatedMembers)
	}
	return w.longestStall(start, end)
}

func memberIDs(t *testing.T, ns, name string) map[string]string {
	out := map[string]string{}
	for _, m := range members(t, ns, name) {
		out[m.Name] = m.Status.MemberID
	}
	return out
}

// TestVersionRules: a skipped minor is refused before any member is touched,
// and a minor downgrade goes through etcd's downgrade API.
func TestVersionRules(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-versions")
	const name = "versions"
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = "3.5.35" })
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)
	uids := podUIDs(t, ns, name)
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = "3.7.3" })
	eventually(t, 2*time.Minute, "the skipped minor refused", func() (bool, string) {
		p := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Progressing)
		return p != nil && p.Reason == conditions.ReasonVersionChangeRefused && strings.Contains(p.Message, "skips a minor"), condString(p)
	})
	if got := podUIDs(t, ns, name); !slices.Equal(got, uids) {
		t.Errorf("a refused version restarted Pods")
	}
	rollTo(t, w, ns, name, 3, "3.6.16")
	rollTo(t, w, ns, name, 3, "3.7.3")
	// One minor down, through etcd's downgrade API.
	rollTo(t, w, ns, name, 3, "3.6.16")
	if !eventRecorded(t, ns, "DowngradeEnabled", "3.6") {
		t.Errorf("the minor downgrade did not go through etcd's downgrade API")
	}
	w.verify("to 3.6.16 done")
}

func podUIDs(t *testing.T, ns, name string) []string {
	var out []string
	for _, p := range pods(t, ns, name) {
		out = append(out, string(p.UID))
	}
	slices.Sort(out)
	return out
}

// TestSettingsRollOut changes etcd options and resources, and grows the
// volumes: each member restarts once with the new flags and requests, and
// each claim grows in place.
func TestSettingsRollOut(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-settings")
	const name = "settings"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)
	w.mark("rolling")
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](512 << 20)}
		c.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("96Mi")}}
		c.Spec.Storage.Size = resource.MustParse("2Gi")
	})
	waitReconciled(t, ns, name, 3, 10*time.Minute)
	w.mark("rolled")
	w.requireWritesBetween("rolling", "rolled", 1)
	for _, p := range pods(t, ns, name) {
		c := p.Spec.Containers[0]
		if !slices.Contains(c.Command, "--quota-backend-bytes=536870912") || c.Resources.Requests.Cpu().String() != "150m" {
			t.Errorf("pod %s runs %v with %v", p.Name, c.Command, c.Resources.Requests)
		}
	}
	for _, m := range members(t, ns, name) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.PVCName(m.Name)}, pvc); err != nil {
			t.Fatal(err)
		}
		if got := pvc.Status.Capacity[corev1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) < 0 {
			t.Errorf("claim of %s has %s, want 2Gi", m.Name, got.String())
		}
	}
	t.Logf("settings roll-out: longest write stall %s", w.longestStall("rolling", "rolled").Round(time.Millisecond))
	w.verify("rolled")
}

// TestRollStopsOnAStuckMember rolls a cluster on node-bound storage with one
// member's node cordoned: that member's new Pod cannot be scheduled, the
// roll stops with the cluster saying which member and why, the others keep
// serving; uncordoned, the roll finishes.
func TestRollStopsOnAStuckMember(t *testing.T) {
	ns := namespace(t, "e2e-rollstuck")
	const name = "pinned"
	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Storage.StorageClassName = ptr.To("sandbox-local")
		c.Spec.ProgressDeadlineSeconds = ptr.To[int32](60)
		c.Spec.Affinity = oneMemberPerNode(name)
	})
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w := startWriter(t, ns, name)
	node := pods(t, ns, name)[members(t, ns, name)[0].Name].Spec.NodeName
	if out, err := kubectl("cordon", node); err != nil {
		t.Fatalf("kubectl cordon: %v\n%s", err, out)
	}
	uncordoned := false
	t.Cleanup(func() {
		if !uncordoned {
			_, _ = kubectl("uncordon", node)
		}
	})
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = "3.7.3" })
	eventually(t, 5*time.Minute, "the roll stopped on the pinned member", func() (bool, string) {
		d := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Degraded)
		return d != nil && d.Reason == conditions.ReasonRollOutStuck, condString(d)
	})
	w.mark("stuck")
	w.requireWritesAfter("stuck", 10, time.Minute)
	if out, err := kubectl("uncordon", node); err != nil {
		t.Fatalf("kubectl uncordon: %v\n%s", err, out)
	}
	uncordoned = true
	waitReconciled(t, ns, name, 3, 10*time.Minute)
	w.mark("finished")
	w.verify("finished")
}
