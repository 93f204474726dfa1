package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/migrate"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// migrateNS and migrateTLSNS run an operator of their own each, watching
// that namespace alone, so that it can be scaled to zero for the migration
// without stopping other suites.
const (
	migrateNS    = "e2e-migrate"
	migrateTLSNS = "e2e-migtls"
)

// legacyOperator stands for the legacy operator's Deployment, already
// scaled to zero.
const legacyOperator = "etcd-operator-controller-manager"

// migrateOperator is the Deployment of the operator of a migration suite's
// namespace: release eo-<suite>.
func migrateOperator(ns string) string {
	return migrateRelease(ns) + "-etcd-operator"
}

func migrateRelease(ns string) string { return "eo-" + strings.TrimPrefix(ns, "e2e-") }

// TestMigrate adopts a live legacy cluster of three members under a
// continuous writer: refused while the stopped legacy operator's webhooks
// stand, then a dry run that changes no object, then an apply that
// is stopped after every step and re-run, then the operator, which takes the
// cluster over without restarting a Pod or losing a key, and grows and
// shrinks it 3 → 5 → 3 and recovers an adopted member whose volume was
// wiped.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ns := namespace(t, migrateNS)
	installLegacyCRD(t)
	startMigrateOperator(t, ns)
	const name = "legacy"
	cr := startLegacyCluster(t, ns, name, 3)
	podSelectors.Store(ns+"/"+name, client.MatchingLabels(legacyLabels(name)))
	legacyID := legacyClusterID(t, ns, name)
	uids := legacyPodUIDs(t, ns, name)
	schedule := startLegacyBackups(t, ns, name)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 20, time.Minute)
	legacyWebhooksRefused(t, ns, name)

	scheduleVersion := schedule.GetResourceVersion()
	dryRunChangesNothing(t, ns, name,
		"peer TLS auto-TLS",
		"spec.options.log-level",
		"spec.podDisruptionBudgetTemplate",
		"kind: EtcdSnapshotSchedule",
		"Kept as it is: the record of a finished backup",
	)
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(schedule), schedule); err != nil || schedule.GetResourceVersion() != scheduleVersion {
		t.Errorf("the dry run changed the legacy schedule (err %v)", err)
	}
	applyStoppedAfterEveryStep(t, ns, name, cr, schedule.GetName())
	scheduleCarried(t, ns, schedule)

	w.mark("adopted")
	takeOverAndScale(t, ns, name, w, legacyID, uids)

	// An adopted member whose volume is wiped never comes back as itself:
	// once its Pod is the operator's own (here: its legacy Pod deleted and
	// made again from its member), the data guard refuses to start etcd on
	// a data directory without its write-ahead log, and the member is
	// replaced by a new one (issue 20, claim 3). A legacy Pod the operator
	// has not restarted yet has no guard (docs/migration.md).
	victim := name + "-1"
	adopted := legacyPodUIDs(t, ns, name)
	if _, ok := adopted[victim]; !ok {
		victim = slices.Sorted(maps.Keys(adopted))[0]
	}
	legacyUID := adopted[victim]
	if err := k.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the operator's own Pod for "+victim, func() (bool, string) {
		p := &corev1.Pod{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: victim}, p); err != nil {
			return false, err.Error()
		}
		guarded := p.Annotations[manifest.AnnotationMemberID] != ""
		return string(p.UID) != legacyUID && guarded && podIsReady(p.Status.Conditions),
			fmt.Sprintf("uid %s guarded %t ready %t", p.UID, guarded, podIsReady(p.Status.Conditions))
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w.mark("wiped")
	if err := injector().Wipe(context.Background(), ns, "data-"+victim); err != nil {
		t.Fatal(err)
	}
	if err := injector().Kill(context.Background(), ns, victim, "etcd"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "wiped member "+victim+" replaced", func() (bool, string) {
		ms := members(t, ns, name)
		if slices.Contains(memberNames(ms), victim) {
			if m := ms[slices.Index(memberNames(ms), victim)]; !lostMember(&m) && podIsReady(pods(t, ns, name)[victim].Status.Conditions) && etcdRestarts(t, ns, victim) > 0 {
				t.Fatalf("the wiped member %s came back as itself", victim)
			}
			return false, fmt.Sprintf("still there: %v", memberNames(ms))
		}
		return len(ms) == 3, fmt.Sprintf("replaced: %v", memberNames(ms))
	})
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	w.mark("repaired")
	w.requireWritesBetween("wiped", "repaired", 1)
	if got := getCluster(t, ns, name).Status.ClusterID; got != legacyID {
		t.Errorf("cluster ID changed from %s to %s", legacyID, got)
	}
	w.verify("repaired")

	scheduleRuns(t, ns, schedule.GetName())
}

// takeOverAndScale scales the suite's operator up after an adoption (the
// writer marked "adopted"): the operator takes the cluster over with the
// legacy cluster ID, restarts no Pod, and leaves no legacy object; then it
// grows and shrinks the cluster 3 → 5 → 3. Scaling down removes the newest
// members (or one that is not healthy), so the adopted ones stay on the Pods
// they had under the StatefulSet. Writes are required after each ("taken
// over", "scaled").
func takeOverAndScale(t *testing.T, ns, name string, w *writer, legacyID string, uids map[string]string) *v1alpha2.EtcdCluster {
	t.Helper()
	scaleDeployment(t, ns, migrateOperator(ns), 1)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	c := getCluster(t, ns, name)
	if c.Status.ClusterID != legacyID {
		t.Errorf("cluster ID %s, the legacy cluster's was %s", c.Status.ClusterID, legacyID)
	}
	if got := legacyPodUIDs(t, ns, name); !maps.Equal(got, uids) {
		t.Errorf("pods changed: before %v, after %v", uids, got)
	}
	w.mark("taken over")
	w.requireWritesBetween("adopted", "taken over", 1)
	legacyObjectsGone(t, ns, name)

	for _, n := range []int32{5, 3} {
		setReplicas(t, ns, name, n)
		waitReconciled(t, ns, name, int(n), 5*time.Minute)
	}
	adoptedKeptThroughScaling(t, ns, name, uids)
	w.mark("scaled")
	w.requireWritesBetween("taken over", "scaled", 1)
	return c
}

// adoptedKeptThroughScaling checks that scaling restarted no adopted Pod.
// Scaling down removes the newest members unless one is unhealthy when the
// victim is chosen: an adopted member whose etcd the kubelet was restarting
// then (a liveness probe timing out on a loaded machine) is the one removed.
// Such a member must be gone as a whole, its EtcdMember too: never come back
// on a new Pod.
func adoptedKeptThroughScaling(t *testing.T, ns, name string, before map[string]string) {
	t.Helper()
	after := legacyPodUIDs(t, ns, name)
	left := memberNames(members(t, ns, name))
	for pod, uid := range before {
		switch got, ok := after[pod]; {
		case ok && got != uid:
			t.Errorf("adopted pod %s was replaced while scaling (uid %s, before %s)", pod, got, uid)
		case !ok && slices.Contains(left, pod):
			t.Errorf("adopted pod %s is gone while its member stays: %v", pod, left)
		case !ok:
			t.Logf("adopted member %s was removed by the scale-down (it was not healthy when chosen)", pod)
		}
	}
}

// scheduleRuns waits until a snapshot of one of the carried schedule's
// slots completes, under the operator.
func scheduleRuns(t *testing.T, ns, schedule string) {
	t.Helper()
	eventually(t, 4*time.Minute, "a snapshot of the carried schedule complete", func() (bool, string) {
		list := &v1alpha2.EtcdSnapshotList{}
		if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, schedule+"-") && s.Status.Phase == v1alpha2.SnapshotComplete {
				return true, ""
			}
			seen = append(seen, s.Name+"="+string(s.Status.Phase))
		}
		return false, fmt.Sprint(seen)
	})
}

// startLegacyBackups gives the legacy cluster what the legacy operator's
// backup kinds leave: a schedule (every minute, to a claim) with its
// CronJob, and the record of a finished backup. The CronJob is suspended:
// the legacy backup agent is not part of this suite, only the CronJob's
// retirement is.
func startLegacyBackups(t *testing.T, ns, cluster string) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	newClaim(t, ns, cluster+"-backups")
	sched := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"clusterRef":                 map[string]any{"name": cluster},
		"schedule":                   "* * * * *",
		"destination":                map[string]any{"pvc": map[string]any{"claimName": cluster + "-backups", "subPath": "nightly"}},
		"successfulJobsHistoryLimit": int64(2),
		"failedJobsHistoryLimit":     int64(1),
	}}}
	sched.SetGroupVersionKind(migrate.LegacyScheduleGVK)
	sched.SetNamespace(ns)
	sched.SetName(cluster + "-nightly")
	if err := k.Create(ctx, sched); err != nil {
		t.Fatal(err)
	}
	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{
			Name: cluster + "-nightly-x7k2p", Namespace: ns,
			Labels: map[string]string{"etcd.aenix.io/etcdbackupschedule-name": sched.GetName()},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sched.GetAPIVersion(), Kind: sched.GetKind(), Name: sched.GetName(),
				UID: sched.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *", Suspend: ptr.To(true), ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "backup", Image: image, Command: []string{"/backup-agent"}}},
			}}}},
		},
	}
	if err := k.Create(ctx, cron); err != nil {
		t.Fatal(err)
	}
	backup := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"clusterRef":  map[string]any{"name": cluster},
			"destination": map[string]any{"pvc": map[string]any{"claimName": cluster + "-backups"}},
		},
		"status": map[string]any{"phase": "Complete", "snapshot": map[string]any{"uri": "file:///backup/data/" + cluster + "-once.db"}},
	}}
	backup.SetGroupVersionKind(migrate.LegacyBackupGVK)
	backup.SetNamespace(ns)
	backup.SetName(cluster + "-once")
	if err := k.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	return sched
}

// scheduleCarried checks that the legacy schedule became an
// EtcdSnapshotSchedule of its name and went with its CronJob, and that the
// backup record was left.
func scheduleCarried(t *testing.T, ns string, legacy *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	s := &v1alpha2.EtcdSnapshotSchedule{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: legacy.GetName()}, s); err != nil {
		t.Fatalf("carried schedule: %v", err)
	}
	d := s.Spec.SnapshotTemplate.Spec.Destination.PVC
	if s.Spec.Schedule != "* * * * *" || d == nil || d.SubPath != "nightly" || ptr.Deref(s.Spec.SuccessfulSnapshotsHistoryLimit, 0) != 2 {
		t.Errorf("carried schedule spec %+v", s.Spec)
	}
	if err := k.Get(ctx, client.ObjectKeyFromObject(legacy), legacy.DeepCopy()); !apierrors.IsNotFound(err) {
		t.Errorf("legacy schedule still there: %v", err)
	}
	eventually(t, time.Minute, "the legacy CronJob gone", func() (bool, string) {
		err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: legacy.GetName() + "-x7k2p"}, &batchv1.CronJob{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	backup := &unstructured.Unstructured{}
	backup.SetGroupVersionKind(migrate.LegacyBackupGVK)
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: strings.TrimSuffix(legacy.GetName(), "-nightly") + "-once"}, backup); err != nil {
		t.Errorf("the legacy backup record: %v", err)
	}
}

// startMigrateOperator installs the suite's own operator, for its namespace
// only, and scales it to zero, as the runbook asks before a migration; a
// stand-in for the legacy operator's Deployment is scaled to zero too.
func startMigrateOperator(t *testing.T, ns string) {
	t.Helper()
	if err := installOperatorImage(image, migrateRelease(ns), ns, false, nil, ns); err != nil {
		t.Fatal(err)
	}
	scaleDeployment(t, ns, migrateOperator(ns), 0)
	legacy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: legacyOperator, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"control-plane": "legacy-manager"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"control-plane": "legacy-manager"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: image}}},
			},
		},
	}
	if err := k.Create(context.Background(), legacy); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// scaleDeployment scales a Deployment and waits until it has that many
// Pods, all Ready.
func scaleDeployment(t *testing.T, ns, name string, n int32) {
	t.Helper()
	if out, err := kubectl("-n", ns, "scale", "deployment", name, fmt.Sprintf("--replicas=%d", n)); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("deployment %s at %d", name, n), func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return false, err.Error()
		}
		sel, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		pods := &corev1.PodList{}
		if err := k.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods.Items {
			if podIsReady(p.Status.Conditions) {
				ready++
			}
		}
		return len(pods.Items) == int(n) && ready == int(n), fmt.Sprintf("%d pods, %d ready", len(pods.Items), ready)
	})
}

// dryRunChangesNothing runs the tool without --apply: it must describe the
// cluster (the output holds every string of want) and change no object
// (every resourceVersion stays). It returns the output.
func dryRunChangesNothing(t *testing.T, ns, name string, want ...string) string {
	t.Helper()
	before := legacyVersions(t, ns, name)
	out, code := runMigrateLive(t, ns)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	want = append(want,
		"Found: cluster ID "+legacyClusterID(t, ns, name)+", 3 members",
		"kind: EtcdCluster",
		"kind: EtcdMember",
		"version: 3.5.35",
		"Dry run: nothing was changed",
	)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("dry run output lacks %q:\n%s", w, out)
		}
	}
	if after := legacyVersions(t, ns, name); !maps.Equal(before, after) {
		t.Errorf("the dry run changed objects:\nbefore %v\nafter  %v", before, after)
	}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &v1alpha2.EtcdCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run created an EtcdCluster (err %v)", err)
	}
	return out
}

// applyStoppedAfterEveryStep runs --apply once per step, each run stopped
// right after that step (as if the tool had died there), then once to the
// end; each run starts from what the previous left. A run with the new
// operator up is refused first, changing nothing. schedule, when not empty,
// is a legacy schedule the run must carry.
func applyStoppedAfterEveryStep(t *testing.T, ns, name string, cr *unstructured.Unstructured, schedule string) {
	t.Helper()
	backups := t.TempDir()
	scaleDeployment(t, ns, migrateOperator(ns), 1)
	before := legacyVersions(t, ns, name)
	if out, code := runMigrateLive(t, ns, "--apply", "--yes", "--backup-dir", backups); code != 1 || !strings.Contains(out, "is not scaled to zero") {
		t.Errorf("apply with the operator up: exit %d, want a refusal\n%s", code, out)
	}
	if after := legacyVersions(t, ns, name); !maps.Equal(before, after) {
		t.Errorf("the refused apply changed objects:\nbefore %v\nafter  %v", before, after)
	}
	scaleDeployment(t, ns, migrateOperator(ns), 0)
	for _, s := range migrate.Steps[:len(migrate.Steps)-1] {
		out, code := runMigrateLive(t, ns, "--apply", "--yes", "--backup-dir", backups, "--stop-after", s.Name)
		if code != migrate.ExitStopped {
			t.Fatalf("apply stopped after %s: exit %d\n%s", s.Name, code, out)
		}
		t.Logf("stopped after %s", s.Name)
	}
	out, code := runMigrateLive(t, ns, "--apply", "--yes", "--backup-dir", backups)
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "Adopted "+ns+"/"+name) || (schedule != "" && !strings.Contains(out, "Carried schedule "+ns+"/"+schedule)) {
		t.Errorf("apply output lacks the adoption:\n%s", out)
	}
	snapshotIsValid(t, backups)
	// Nothing left to do: a further run finds no legacy cluster.
	if out, code := runMigrate(t, ns, "--apply", "--yes", "--backup-dir", backups); code != 0 || !strings.Contains(out, "nothing to migrate") {
		t.Errorf("re-run after the adoption: exit %d\n%s", code, out)
	}
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(cr), cr.DeepCopy()); !apierrors.IsNotFound(err) {
		t.Errorf("legacy EtcdCluster still there: %v", err)
	}
}

// snapshotIsValid checks the safety snapshot with etcdutl.
func snapshotIsValid(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	if len(files) != 1 {
		t.Fatalf("safety snapshots: %v", files)
	}
	out, err := exec.Command(filepath.Join(bin, "etcdutl"), "snapshot", "status", files[0], "-w", "table").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v\n%s", files[0], err, out)
	}
	t.Logf("safety snapshot %s:\n%s", filepath.Base(files[0]), out)
}

// legacyObjectsGone checks what the adoption retired and what it kept.
func legacyObjectsGone(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet %s still there (err %v)", name, err)
	}
	// The adopted Pods read their environment from the cluster-state
	// ConfigMap at every container start: it stays, with the cluster.
	cm := &corev1.ConfigMap{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-cluster-state"}, cm); err != nil {
		t.Errorf("cluster-state ConfigMap: %v", err)
	} else if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "EtcdCluster" || cm.Data["ETCD_INITIAL_CLUSTER_STATE"] != "existing" {
		t.Errorf("cluster-state ConfigMap: owners %v, data %v", cm.OwnerReferences, cm.Data)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pdb); err == nil && !metav1.IsControlledBy(pdb, getCluster(t, ns, name)) {
		t.Errorf("PodDisruptionBudget %s is not the operator's: %v", name, pdb.OwnerReferences)
	}
	svc := &corev1.Service{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: want the operator's headless Service (err %v, clusterIP %q)", name, err, svc.Spec.ClusterIP)
	}
	headless := &corev1.Service{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-headless"}, headless); err != nil {
		t.Errorf("legacy headless Service: %v", err)
	} else if len(headless.OwnerReferences) != 1 || headless.OwnerReferences[0].Kind != "EtcdCluster" || headless.OwnerReferences[0].APIVersion != v1alpha2.GroupVersion.String() {
		t.Errorf("legacy headless Service owners: %v", headless.OwnerReferences)
	}
	for _, p := range legacyPods(t, ns, name) {
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "EtcdMember" || ref.Name != p.Name {
			t.Errorf("pod %s is controlled by %v", p.Name, ref)
		}
	}
}

// legacyVersions records the content (contentOf) of every object of the legacy
// cluster: the CR, StatefulSet, Pods, claims, Services, ConfigMap and PDB.
func legacyVersions(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	return legacyVersionsAtLeast(t, ns, name, 10)
}

// legacyVersionsAtLeast is legacyVersions, failing when fewer than min
// objects are found.
func legacyVersionsAtLeast(t *testing.T, ns, name string, min int) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	sel := client.MatchingLabels(legacyLabels(name))
	lists := map[string]client.ObjectList{
		"pod": &corev1.PodList{}, "pvc": &corev1.PersistentVolumeClaimList{}, "svc": &corev1.ServiceList{},
		"sts": &appsv1.StatefulSetList{}, "cm": &corev1.ConfigMapList{}, "pdb": &policyv1.PodDisruptionBudgetList{},
	}
	for kind, list := range lists {
		opts := []client.ListOption{client.InNamespace(ns)}
		if kind != "pvc" {
			opts = append(opts, sel)
		}
		if err := k.List(ctx, list, opts...); err != nil {
			t.Fatal(err)
		}
		items, _ := apimetaItems(list)
		for _, o := range items {
			out[kind+"/"+o.GetName()] = contentOf(t, o)
		}
	}
	legacy := &unstructured.UnstructuredList{}
	legacy.SetGroupVersionKind(migrate.LegacyGVR.GroupVersion().WithKind("EtcdClusterList"))
	if err := k.List(ctx, legacy, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, o := range legacy.Items {
		if o.GetName() == name {
			out["etcdcluster.etcd.aenix.io/"+o.GetName()] = contentOf(t, o.Object)
		}
	}
	if len(out) < min {
		t.Fatalf("expected the legacy cluster's objects, found %v", out)
	}
	return out
}

// contentOf is a digest of what a tool could change of an object: all of
// it but its status and the API server's bookkeeping (resourceVersion,
// managedFields), which move with every status update of the kubelet and
// the controllers: a legacy Pod whose readiness probe times out on a busy
// machine is not a change the migration made.
func contentOf(t *testing.T, o any) string {
	t.Helper()
	u, ok := o.(map[string]any)
	if !ok {
		var err error
		if u, err = runtime.DefaultUnstructuredConverter.ToUnstructured(o); err != nil {
			t.Fatal(err)
		}
	}
	u = maps.Clone(u)
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		delete(md, "resourceVersion")
		delete(md, "managedFields")
		u["metadata"] = md
	}
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

func apimetaItems(list client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := list.(type) {
	case *corev1.PodList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PersistentVolumeClaimList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.StatefulSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *policyv1.PodDisruptionBudgetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, errors.New("unknown list")
	}
	return out, nil
}

// podUIDs maps the cluster's Pods (found by the legacy labels, which the
// operator's Pods carry too) to their UIDs.
func legacyPodUIDs(t *testing.T, ns, name string) map[string]string {
	out := map[string]string{}
	for _, p := range legacyPods(t, ns, name) {
		out[p.Name] = string(p.UID)
	}
	return out
}

func legacyPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels(legacyLabels(name))); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && strings.HasPrefix(p.Name, name+"-") && len(p.Name) == len(name)+2 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// etcdRestarts is how often the etcd container of a Pod restarted (-1 when
// the Pod is gone).
func etcdRestarts(t *testing.T, ns, pod string) int32 {
	t.Helper()
	p := &corev1.Pod{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		return -1
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "etcd" {
			return cs.RestartCount
		}
	}
	return 0
}

// legacyClusterID asks the legacy cluster for its ID.
func legacyClusterID(t *testing.T, ns, name string) string {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list of %s: %v", name, err)
	}
	return etcd.FormatID(resp.Header.ClusterId)
}

var (
	migrateOnce sync.Once
	migrateBin  string
	migrateErr  error
)

// runMigrate builds etcd-migrate once and runs it against the suite's
// namespace and operators; it returns the combined output and exit code.
func runMigrate(t *testing.T, ns string, args ...string) (string, int) {
	t.Helper()
	migrateOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcd-migrate-")
		if err != nil {
			migrateErr = err
			return
		}
		migrateBin = filepath.Join(dir, "etcd-migrate")
		cmd := exec.Command("go", "build", "-o", migrateBin, "./cmd/etcd-migrate")
		cmd.Dir = tools.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			migrateErr = fmt.Errorf("building etcd-migrate: %w\n%s", err, out)
		}
	})
	if migrateErr != nil {
		t.Fatal(migrateErr)
	}
	full := append([]string{"-n", ns, "--operator", ns + "/" + migrateOperator(ns), "--legacy-operator", ns + "/" + legacyOperator}, args...)
	cmd := exec.Command(migrateBin, full...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("etcd-migrate %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("etcd-migrate %s:\n%s", strings.Join(args, " "), out.String())
	return out.String(), 0
}

// notReadyRefusal is how etcd-migrate refuses a cluster one of whose Pods
// is not Ready.
const notReadyRefusal = "is not Running and Ready"

// runMigrateLive runs etcd-migrate on a live legacy cluster the way an
// operator of it would: when the tool refuses because a Pod is not Ready
// (a readiness probe of one second timing out on a busy machine), it is
// run again once every Pod of the namespace is Ready, for up to two
// minutes. Any other result is returned as it is.
func runMigrateLive(t *testing.T, ns string, args ...string) (string, int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, code := runMigrate(t, ns, args...)
		if !strings.Contains(out, notReadyRefusal) || time.Now().After(deadline) {
			return out, code
		}
		t.Logf("etcd-migrate %s refused a Pod that is not Ready; running it again once the Pods are", strings.Join(args, " "))
		eventually(t, time.Until(deadline)+time.Second, "the legacy Pods Ready", func() (bool, string) {
			list := &corev1.PodList{}
			if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			for _, p := range list.Items {
				done := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
				if p.DeletionTimestamp == nil && !done && !podIsReady(p.Status.Conditions) {
					return false, p.Name + " not Ready"
				}
			}
			return true, ""
		})
	}
}

// lostMember reports whether the member says it cannot come back as itself.
func lostMember(m *v1alpha2.EtcdMember) bool {
	return conditions.IsTrue(m.Status.Conditions, conditions.Lost)
}
