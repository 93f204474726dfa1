package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// The operator upgrade drill (make test-upgrade, and make test-full): a
// sandbox of its own, because the chart installs the CRDs, which are
// cluster-wide. TestMain installs the previous release (E2E_UPGRADE_FROM:
// its image and chart, built by hack/previous-release.sh) instead of the
// tree's operator; the drill makes clusters of each kind with it, upgrades
// to the tree's chart and image with helm, and rolls back.

const upgradeNS = "e2e-opupgrade"

func init() { suiteNamespaces = append(suiteNamespaces, upgradeNS) }

// upgradeFrom is the directory of the previous release, when the drill
// runs.
func upgradeFrom() string { return os.Getenv("E2E_UPGRADE_FROM") }

var previousImage string

// installPreviousRelease installs the previous release's chart and image
// as the main operator, watching every namespace, as a user installs it.
func installPreviousRelease(ctx context.Context, dir string) error {
	refs, err := sb.LoadImage(ctx, filepath.Join(dir, "etcd-operator-image.tar"))
	if err != nil {
		return fmt.Errorf("loading the previous release's image (make previous-release): %w", err)
	}
	previousImage = refs[0]
	return installChart(filepath.Join(dir, "chart"), previousImage, operatorRelease, operatorNS, true, nil, nil)
}

// memberPodUIDs are the UIDs of every member Pod of the clusters, by Pod name.
func memberPodUIDs(t *testing.T, clusters ...string) map[string]types.UID {
	out := map[string]types.UID{}
	for _, c := range clusters {
		ps := pods(t, upgradeNS, c)
		for _, m := range members(t, upgradeNS, c) {
			// A snapshot Job's Pod carries the cluster's label too.
			out[m.Name] = ps[m.Name].UID
		}
	}
	return out
}

// memberIDsOf are the etcd member IDs of every member of the clusters.
func memberIDsOf(t *testing.T, clusters ...string) map[string]string {
	out := map[string]string{}
	for _, c := range clusters {
		maps.Copy(out, memberIDs(t, upgradeNS, c))
	}
	return out
}

// operatorImage is the image the operator's running Pod was made from.
func operatorImage(t *testing.T) string {
	t.Helper()
	list, err := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && len(p.Spec.Containers) > 0 {
			images = append(images, p.Spec.Containers[0].Image)
		}
	}
	return strings.Join(images, ",")
}

// TestOperatorUpgrade: clusters of every kind made by the previous release
// (on a claim, in memory, mutual TLS with authentication, paused, one
// with a snapshot schedule) live through helm upgrade to this tree and
// helm rollback: no member Pod is made again and no membership changes,
// writers lose no acknowledged write, and the upgraded operator still
// scales, upgrades etcd, resumes and takes scheduled snapshots.
func TestOperatorUpgrade(t *testing.T) {
	from := upgradeFrom()
	if from == "" {
		t.Fatal("the operator upgrade drill needs a sandbox of its own with the previous release installed: run make test-upgrade (part of make test-full)")
	}
	ns := namespace(t, upgradeNS)
	ctx := context.Background()
	if got := operatorImage(t); got != previousImage {
		t.Fatalf("the operator runs %s, not the previous release's %s", got, previousImage)
	}

	// Made by the previous release.
	s3 := startS3(t, ns)
	s3.makeBucket(t, "backups")
	newCluster(t, ns, "disk", 3)
	newCluster(t, ns, "mem", 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse("256Mi")}
		c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](100 << 20)}
	})
	newCluster(t, ns, "secure", 3, secureCluster(t, ns, "secure"))
	newCluster(t, ns, "paused", 1)
	sched := &v1alpha2.EtcdSnapshotSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-every-minute", Namespace: ns},
		Spec: v1alpha2.EtcdSnapshotScheduleSpec{
			Schedule: "* * * * *",
			SnapshotTemplate: v1alpha2.EtcdSnapshotTemplate{Spec: v1alpha2.EtcdSnapshotSpec{
				ClusterRef: corev1.LocalObjectReference{Name: "disk"}, Destination: s3.location("backups", "disk"),
			}},
			SuccessfulSnapshotsHistoryLimit: ptr.To[int32](2),
		},
	}
	for name, n := range map[string]int{"disk": 3, "mem": 3, "secure": 3, "paused": 1} {
		waitReconciled(t, ns, name, n, 5*time.Minute)
	}
	setReplicas(t, ns, "paused", 0)
	waitReconciled(t, ns, "paused", 0, 3*time.Minute)
	if err := k.Create(ctx, sched); err != nil {
		t.Fatal(err)
	}
	before := waitScheduledSnapshot(t, ns, sched.Name, "")

	running := []string{"disk", "mem", "secure"}
	writers := map[string]*writer{}
	for _, c := range running {
		writers[c] = startWriter(t, ns, c)
		writers[c].requireWritesAfter("", 5, time.Minute)
	}
	uids, ids := memberPodUIDs(t, running...), memberIDsOf(t, running...)
	dormant := members(t, ns, "paused")

	// helm upgrade to this tree.
	for _, w := range writers {
		w.mark("upgrade")
	}
	if err := installOperator(operatorRelease, operatorNS, true, nil); err != nil {
		t.Fatal(err)
	}
	if got := operatorImage(t); got != image {
		t.Fatalf("after helm upgrade the operator runs %s, want %s", got, image)
	}
	untouched(t, "after the upgrade", running, uids, ids, dormant)
	for _, w := range writers {
		w.mark("upgraded")
		w.requireWritesBetween("upgrade", "upgraded", 1)
		t.Logf("upgrade: longest write stall of %s %s", w.cluster, w.longestStall("upgrade", "upgraded").Round(time.Millisecond))
	}
	waitScheduledSnapshot(t, ns, sched.Name, before)

	// helm rollback to the previous release: the same promise.
	for _, w := range writers {
		w.mark("rollback")
	}
	helm(t, "rollback", operatorRelease, "1", "--namespace", operatorNS, "--wait", "--timeout", "3m")
	if got := operatorImage(t); got != previousImage {
		t.Fatalf("after helm rollback the operator runs %s, want %s", got, previousImage)
	}
	untouched(t, "after the rollback", running, uids, ids, dormant)
	for _, w := range writers {
		w.mark("rolled back")
		w.requireWritesBetween("rollback", "rolled back", 1)
	}

	// Upgraded again, the operator still changes what it is asked to:
	// an etcd upgrade rolled member by member, a scale-up, a resume.
	if err := installOperator(operatorRelease, operatorNS, true, nil); err != nil {
		t.Fatal(err)
	}
	untouched(t, "after the second upgrade", running, uids, ids, dormant)
	rollTo(t, writers["disk"], ns, "disk", 3, "3.7.3")
	writers["mem"].mark("scale")
	setReplicas(t, ns, "mem", 5)
	waitReconciled(t, ns, "mem", 5, 5*time.Minute)
	setReplicas(t, ns, "paused", 1)
	waitReconciled(t, ns, "paused", 1, 3*time.Minute)
	if got := members(t, ns, "paused"); len(got) != 1 || got[0].Status.MemberID != dormant[0].Status.MemberID {
		t.Errorf("resumed cluster's members %v, want the dormant %s back", memberNames(got), dormant[0].Name)
	}
	for _, w := range writers {
		w.verify("rolled back")
	}
}

// untouched waits for the operator to be through a few passes of every
// cluster, then checks that no member Pod was made again, no membership
// changed, the paused cluster stayed paused and every cluster is at its
// target.
func untouched(t *testing.T, when string, running []string, uids map[string]types.UID, ids map[string]string, dormant []v1alpha2.EtcdMember) {
	t.Helper()
	// Two health polls (30 s each) of every cluster at rest.
	consistently(t, 75*time.Second, "member Pods and membership "+when, func() (bool, string) {
		if got := memberPodUIDs(t, running...); !maps.Equal(got, uids) {
			return false, fmt.Sprintf("member Pods %v, before %v", got, uids)
		}
		if got := memberIDsOf(t, running...); !maps.Equal(got, ids) {
			return false, fmt.Sprintf("members %v, before %v", got, ids)
		}
		ms := members(t, upgradeNS, "paused")
		if len(ms) != 1 || ms[0].Name != dormant[0].Name || !ms[0].Spec.Dormant || len(pods(t, upgradeNS, "paused")) != 0 {
			return false, fmt.Sprintf("paused cluster has members %v and %d Pods", memberNames(ms), len(pods(t, upgradeNS, "paused")))
		}
		return true, ""
	})
	for _, c := range running {
		waitReconciled(t, upgradeNS, c, len(members(t, upgradeNS, c)), 2*time.Minute)
	}
}

// waitScheduledSnapshot waits for a scheduled snapshot other than after to
// complete, and returns its name.
func waitScheduledSnapshot(t *testing.T, ns, schedule, after string) string {
	t.Helper()
	var last string
	eventually(t, 4*time.Minute, "a scheduled snapshot completes", func() (bool, string) {
		st, quiet := settled(t, ns, schedule)
		last = st.LastSnapshot
		return quiet && last != after, fmt.Sprintf("last snapshot %q", last)
	})
	return last
}

// secureCluster makes a cluster's own TLS material (mutual TLS on both
// planes) and root credentials, registers them for the suite's clients,
// and returns what sets its spec to use them.
func secureCluster(t *testing.T, ns, name string) func(*v1alpha2.EtcdCluster) {
	t.Helper()
	ca, clientCert := ownMaterial(t, ns, name)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*clientCert}, MinVersion: tls.VersionTLS12})
	pw := "upgrade-" + name
	var password atomic.Pointer[string]
	password.Store(&pw)
	clientPassword.Store(ns+"/"+name, &password)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-root"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("root"), "password": []byte(pw)}}
	if err := k.Create(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	return func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = ownTLS(name)
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: name + "-root"}}
	}
}

// helm runs the toolchain's helm against the sandbox.
func helm(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "helm"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
