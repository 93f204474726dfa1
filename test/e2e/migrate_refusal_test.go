package e2e

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// migrateRefusalsNS holds legacy clusters the tool must refuse; no operator
// watches it.
const migrateRefusalsNS = "e2e-migrate-refusals"

// TestMigrateRefusals builds legacy clusters the tool cannot adopt in place
// (emptyDir storage, a learner in etcd, a claim owned by something unknown)
// and checks that --apply reports each with its reason and changes none of
// their objects.
func TestMigrateRefusals(t *testing.T) {
	t.Parallel()
	ns := namespace(t, migrateRefusalsNS)
	installLegacyCRD(t)
	startLegacyCluster(t, ns, "ephemeral", 1, func(spec map[string]any) {
		spec["storage"] = map[string]any{"emptyDir": map[string]any{}}
	})
	startLegacyCluster(t, ns, "learning", 1)
	startLegacyCluster(t, ns, "claimed", 1)
	podSelectors.Store(ns+"/learning", client.MatchingLabels(legacyLabels("learning")))
	addLearner(t, ns, "learning")
	claimForSomeoneElse(t, ns, "data-claimed-0")

	before := map[string]map[string]string{}
	for _, name := range []string{"ephemeral", "learning", "claimed"} {
		before[name] = legacyVersionsAtLeast(t, ns, name, 5)
	}
	out, code := runMigrate(t, ns, "--apply", "--yes", "--skip-backup")
	if code != 1 {
		t.Errorf("apply over refused clusters: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"spec.storage.emptyDir",
		"is a learner",
		"data-claimed-0 is controlled by ConfigMap someone-else",
		"Nothing to adopt",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for name, versions := range before {
		if after := legacyVersionsAtLeast(t, ns, name, 5); !maps.Equal(versions, after) {
			t.Errorf("refused cluster %s changed:\nbefore %v\nafter  %v", name, versions, after)
		}
	}
}

// addLearner adds a learner that never starts, as a scale-up the legacy
// cluster's users began by hand and did not finish.
func addLearner(t *testing.T, ns, name string) {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.MemberAddAsLearner(ctx, []string{"https://stray." + name + "-headless." + ns + ".svc:2380"}); err != nil {
		t.Fatalf("adding a learner to %s: %v", name, err)
	}
}

// claimForSomeoneElse makes a ConfigMap the controller of a claim.
func claimForSomeoneElse(t *testing.T, ns, claim string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone-else", Namespace: ns}}
	if err := k.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, pvc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.OwnerReferences = append(pvc.OwnerReferences, metav1.OwnerReference{
		APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true),
	})
	if err := k.Patch(ctx, pvc, patch); err != nil {
		t.Fatal(err)
	}
}
