package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// migrateRefusalsNS holds legacy clusters the tool must refuse; no operator
// watches it.
const migrateRefusalsNS = "e2e-migrate-refusals"

// TestMigrateRefusals builds legacy clusters the tool cannot adopt in place
// (emptyDir storage, a learner in etcd, a claim owned by something unknown,
// a member whose Pod runs but is not Ready, a server certificate that does
// not name the members)
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
	startLegacyCluster(t, ns, "unready", 1)
	misnamedCluster(t, ns, "misnamed")
	podSelectors.Store(ns+"/learning", client.MatchingLabels(legacyLabels("learning")))
	addLearner(t, ns, "learning")
	claimForSomeoneElse(t, ns, "data-claimed-0")
	makeUnready(t, ns, "unready")

	before := map[string]map[string]string{}
	for _, name := range []string{"ephemeral", "learning", "claimed", "unready", "misnamed"} {
		before[name] = legacyVersionsAtLeast(t, ns, name, 5)
	}
	secrets := secretVersions(t, ns)
	out, code := runMigrate(t, ns, "--apply", "--yes", "--skip-backup")
	if code != 1 {
		t.Errorf("apply over refused clusters: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"spec.storage.emptyDir",
		"is a learner",
		"data-claimed-0 is controlled by ConfigMap someone-else",
		// Its only member's Pod is not Ready: nothing to ask etcd through.
		"asking etcd for its members: no Ready Pod",
		"the server certificate in Secret misnamed-server does not serve misnamed-0.misnamed-headless." + ns + ".svc",
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
	if after := secretVersions(t, ns); !maps.Equal(secrets, after) {
		t.Errorf("Secrets changed:\nbefore %v\nafter  %v", secrets, after)
	}
}

// misnamedCluster starts a legacy cluster with server and peer TLS whose
// server certificate names other hosts than the members: etcd serves it,
// but the operator, which verifies the members' names, could not reach them.
func misnamedCluster(t *testing.T, ns, name string) {
	t.Helper()
	ca := newNamedCA(t, "misnamed CA")
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	peerNames := []string{"*." + name + "-headless." + ns + ".svc", "*." + name + "-headless." + ns + ".svc.cluster.local"}
	createTLSSecret(t, ns, name+"-server", ca.issue(t, "server", []string{"*.elsewhere." + ns + ".svc"}, usage), ca.certPEM)
	createTLSSecret(t, ns, name+"-peer", ca.issue(t, "peer", peerNames, usage), ca.certPEM)
	startLegacyCluster(t, ns, name, 1, func(spec map[string]any) {
		spec["security"] = map[string]any{"tls": map[string]any{
			"serverSecret": name + "-server", "peerSecret": name + "-peer", "peerTrustedCASecret": name + "-peer",
		}}
	})
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

// makeUnready changes the legacy StatefulSet's readiness probe to one that
// fails, and waits until the Pod it rolls runs etcd but is not Ready, and
// its status no longer changes.
func makeUnready(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sts); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(sts.DeepCopy())
	sts.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/no-such-path"
	if err := k.Patch(ctx, sts, patch); err != nil {
		t.Fatal(err)
	}
	settled, since := "", time.Time{}
	eventually(t, 3*time.Minute, "pod "+name+"-0 running and not ready", func() (bool, string) {
		p := &corev1.Pod{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-0"}, p); err != nil {
			return false, err.Error()
		}
		// The StatefulSet's status settles too, so that nothing but the
		// tool could change the objects' versions afterwards.
		if err := k.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil || sts.Status.ObservedGeneration != sts.Generation || sts.Status.UpdatedReplicas != 1 {
			return false, fmt.Sprintf("statefulset not settled (%v)", err)
		}
		probe := p.Spec.Containers[0].ReadinessProbe
		running := p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && ptr.Deref(p.Status.ContainerStatuses[0].Started, false)
		if probe == nil || probe.HTTPGet.Path != "/no-such-path" || !running || podIsReady(p.Status.Conditions) {
			settled = ""
			return false, fmt.Sprintf("phase %s, ready %v", p.Status.Phase, podIsReady(p.Status.Conditions))
		}
		// Its status settles: the same version for a few seconds.
		if p.ResourceVersion != settled {
			settled, since = p.ResourceVersion, time.Now()
		}
		return time.Since(since) > 5*time.Second, "pod status still changing"
	})
}
