package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestSnapshotAndRestore writes 10,000 keys into a cluster of 3, snapshots it
// to MinIO (over HTTPS from a private CA: refused without the CA's Secret)
// and to a PVC, restores each snapshot into a new cluster of 3 and compares
// every key and value; then every way a snapshot or a restore can fail, each
// reported with a reason that says which. One more snapshot has no keys:
// its Jobs trade their ServiceAccount token at MinIO's STS, which trusts
// the API server as its OpenID provider (s3.webIdentity), and it is
// verified the same way.
func TestSnapshotAndRestore(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-snapshot")
	s3 := startS3(t, ns, withWebIdentity(t, "sts.minio"))
	s3.makeBucket(t, "backups")
	newClaim(t, ns, "backups")
	const source = "source"
	newCluster(t, ns, source, 3)
	waitReconciled(t, ns, source, 3, 5*time.Minute)
	want := writeKeys(t, ns, source, 10000)

	newSnapshot(t, ns, "to-s3", source, s3.location("backups", source))
	newSnapshot(t, ns, "to-pvc", source, pvcLocation("backups", source))
	// The store's certificate comes from a private CA: without the CA's
	// Secret the agent refuses it, and says why.
	untrusted := s3.location("backups", "untrusted")
	untrusted.S3.CASecretRef = nil
	newSnapshot(t, ns, "untrusted", source, untrusted)
	// No keys: the Jobs' ServiceAccount token, projected by the operator,
	// traded at MinIO's STS, for the snapshot and its verification.
	byIdentity := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "by-identity", Namespace: ns},
		Spec: v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: source},
			Destination: s3.identityLocation("backups", "identity"), Verify: true},
	}
	if err := k.Create(context.Background(), byIdentity); err != nil {
		t.Fatal(err)
	}
	toS3 := waitSnapshot(t, ns, "to-s3", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	toPVC := waitSnapshot(t, ns, "to-pvc", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	waitSnapshot(t, ns, "untrusted", v1alpha2.SnapshotFailed, conditions.ReasonS3CertificateNotTrusted, 5*time.Minute)
	if keys := s3.objects(t, "backups", "untrusted/"); len(keys) != 0 {
		t.Errorf("a snapshot refused as untrusted left objects: %v", keys)
	}
	checkArtifact(t, waitSnapshot(t, ns, "by-identity", v1alpha2.SnapshotComplete, "", 5*time.Minute), "s3://backups/identity/by-identity.db")
	waitVerified(t, ns, "by-identity", 5*time.Minute)
	checkArtifact(t, toS3, "s3://backups/source/to-s3.db")
	checkArtifact(t, toPVC, "file:///snapshot/data/source/to-pvc.db")
	stored := storedAsRecorded(t, ns, s3, toS3)

	t.Run("restore", func(t *testing.T) {
		// The restore by web identity runs in the seed's Pod, as the
		// namespace's default ServiceAccount; one member proves it.
		for name, r := range map[string]struct {
			from    v1alpha2.SnapshotLocation
			members int32
		}{
			"from-s3":     {s3.location("backups", "source/to-s3.db"), 3},
			"from-pvc":    {pvcLocation("backups", "source/to-pvc.db"), 3},
			"by-identity": {s3.identityLocation("backups", "identity/by-identity.db"), 1},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				newCluster(t, ns, name, r.members, restoreFrom(r.from))
				waitReconciled(t, ns, name, int(r.members), 6*time.Minute)
				// The restore agent ran from the operator's image,
				// mounted in the seed's Pod (the sandbox's nodes can).
				requireToolsVolume(t, ns, name, true)
				if got := readKeys(t, ns, name); !maps.Equal(got, want) {
					t.Errorf("restored %d keys, want %d; first difference: %s", len(got), len(want), firstDifference(got, want))
				}
				if getCluster(t, ns, name).Status.ClusterID == getCluster(t, ns, source).Status.ClusterID {
					t.Error("the restored cluster has the source's cluster ID")
				}
				w := startWriter(t, ns, name)
				w.requireWritesAfter("", 10, 2*time.Minute)
				w.verify("")
			})
		}
	})
	t.Run("failures", func(t *testing.T) {
		t.Run("wrong S3 credentials", func(t *testing.T) {
			t.Parallel()
			s3.secret(t, "wrong-credentials", minioUser, "not-the-password")
			loc := s3.location("backups", "wrong")
			loc.S3.CredentialsSecretRef.Name = "wrong-credentials"
			newSnapshot(t, ns, "wrong-credentials", source, loc)
			waitSnapshot(t, ns, "wrong-credentials", v1alpha2.SnapshotFailed, conditions.ReasonS3CredentialsRejected, 5*time.Minute)
		})
		t.Run("missing bucket", func(t *testing.T) {
			t.Parallel()
			newSnapshot(t, ns, "missing-bucket", source, s3.location("no-such-bucket", ""))
			waitSnapshot(t, ns, "missing-bucket", v1alpha2.SnapshotFailed, conditions.ReasonBucketNotFound, 5*time.Minute)
		})
		t.Run("missing PVC", func(t *testing.T) {
			t.Parallel()
			newSnapshot(t, ns, "missing-pvc", source, pvcLocation("no-such-claim", ""))
			waitSnapshot(t, ns, "missing-pvc", v1alpha2.SnapshotFailed, conditions.ReasonPVCNotFound, 2*time.Minute)
		})
		t.Run("object exists", func(t *testing.T) {
			t.Parallel()
			// The EtcdSnapshot goes; its object stays. A new snapshot of
			// the same name would write the same key: refused.
			if err := k.Delete(context.Background(), &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "to-s3"}}); err != nil {
				t.Fatal(err)
			}
			eventually(t, time.Minute, "the old EtcdSnapshot gone", func() (bool, string) {
				err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "to-s3"}, &v1alpha2.EtcdSnapshot{})
				return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
			})
			newSnapshot(t, ns, "to-s3", source, s3.location("backups", source))
			waitSnapshot(t, ns, "to-s3", v1alpha2.SnapshotFailed, conditions.ReasonSnapshotExists, 5*time.Minute)
			if again := s3.read(t, "backups", "source/to-s3.db"); string(again) != string(stored) {
				t.Error("the existing object was changed")
			}
		})
		t.Run("unreachable cluster", func(t *testing.T) {
			t.Parallel()
			testUnreachable(t, ns)
		})
		t.Run("corrupted snapshot", func(t *testing.T) {
			t.Parallel()
			testCorruptedRestore(t, ns, toPVC)
		})
		t.Run("older etcd minor", func(t *testing.T) {
			t.Parallel()
			testOlderMinor(t, ns)
		})
	})
}

// storedAsRecorded checks that the object of a snapshot to S3 is what its
// status.artifact says, and that its Job is deleted once the result is
// recorded; it returns the object.
func storedAsRecorded(t *testing.T, ns string, s3 *s3Server, snap *v1alpha2.EtcdSnapshot) []byte {
	t.Helper()
	stored := s3.read(t, "backups", strings.TrimPrefix(snap.Status.Artifact.URI, "s3://backups/"))
	if sum := sha256.Sum256(stored); "sha256:"+hex.EncodeToString(sum[:]) != snap.Status.Artifact.Checksum || int64(len(stored)) != snap.Status.Artifact.SizeBytes {
		t.Errorf("the object in MinIO (%d bytes, %x) is not what status.artifact says (%+v)", len(stored), sum, snap.Status.Artifact)
	}
	selector := manifest.LabelSnapshot + "=" + snap.Name
	if jobs, _ := kubectl("-n", ns, "get", "jobs", "-l", selector, "-o", "name"); strings.TrimSpace(jobs) != "" {
		// Deleted once the result is recorded; wait for the garbage collector.
		eventually(t, time.Minute, "the finished Job deleted", func() (bool, string) {
			out, _ := kubectl("-n", ns, "get", "jobs", "-l", selector, "-o", "name")
			return strings.TrimSpace(out) == "", out
		})
	}
	return stored
}

// testUnreachable snapshots a cluster whose only member is cut off.
func testUnreachable(t *testing.T, ns string) {
	const name = "lonely"
	newCluster(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 3*time.Minute)
	pod := members(t, ns, name)[0].Name
	if err := sb.Partition(context.Background(), ns, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Heal(context.Background(), ns, pod) })
	newSnapshot(t, ns, "unreachable", name, pvcLocation("backups", "unreachable"))
	waitSnapshot(t, ns, "unreachable", v1alpha2.SnapshotFailed, conditions.ReasonClusterUnreachable, 6*time.Minute)
}

// testCorruptedRestore restores a copy of a snapshot with bytes changed in
// the middle: the restore fails before etcd ever starts, and the seed's
// data directory stays empty.
func testCorruptedRestore(t *testing.T, ns string, good *v1alpha2.EtcdSnapshot) {
	dir := filepath.Join(claimPath(t, ns, "backups"), "source")
	for _, suffix := range []string{"", ".json"} {
		data, err := os.ReadFile(filepath.Join(dir, good.Name+".db"+suffix))
		if err != nil {
			t.Fatal(err)
		}
		if suffix == "" {
			copy(data[len(data)/2:], "these bytes are not what etcd wrote")
		} else {
			data = []byte(strings.ReplaceAll(string(data), good.Name+".db", "corrupt.db"))
		}
		file := filepath.Join(dir, "corrupt.db"+suffix)
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(file, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	const name = "corrupt"
	newCluster(t, ns, name, 3, restoreFrom(pvcLocation("backups", "source/corrupt.db")))
	seed := waitRestoreFailed(t, ns, name, conditions.ReasonChecksumMismatch)
	p := &corev1.Pod{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: seed.Name}, p); err != nil {
		t.Fatal(err)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == manifest.EtcdContainer && (cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0) {
			t.Errorf("etcd started although the restore failed: %+v", cs.State)
		}
	}
	if entries, err := os.ReadDir(claimPath(t, ns, manifest.PVCName(seed.Name))); err != nil || len(entries) != 0 {
		t.Errorf("the seed's data directory holds %v (%v), want nothing", entries, err)
	}
	if n := len(members(t, ns, name)); n != 1 {
		t.Errorf("%d members: no member may join a cluster whose seed did not restore", n)
	}
}

// testOlderMinor restores a snapshot of etcd 3.7 into a cluster of 3.6.
func testOlderMinor(t *testing.T, ns string) {
	newCluster(t, ns, "newer", 1, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = "3.7.3" })
	waitReconciled(t, ns, "newer", 1, 3*time.Minute)
	newSnapshot(t, ns, "of-newer", "newer", pvcLocation("backups", "newer"))
	snap := waitSnapshot(t, ns, "of-newer", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	if snap.Status.Artifact.EtcdVersion != "3.7.3" {
		t.Errorf("artifact etcdVersion = %q, want 3.7.3", snap.Status.Artifact.EtcdVersion)
	}
	newCluster(t, ns, "older", 1, restoreFrom(pvcLocation("backups", "newer/of-newer.db")))
	seed := waitRestoreFailed(t, ns, "older", conditions.ReasonSnapshotFromNewerEtcd)
	msg := conditions.Get(seed.Status.Conditions, conditions.Ready).Message
	if !strings.Contains(msg, "etcd 3.7.3") || !strings.Contains(msg, "etcd 3.6.16") || !strings.Contains(msg, "spec.version to 3.7 or newer") {
		t.Errorf("the refusal does not say what to do: %s", msg)
	}
}

// waitRestoreFailed waits until the cluster's seed reports its restore
// failing for the reason, and the cluster says so too.
func waitRestoreFailed(t *testing.T, ns, name, reason string) v1alpha2.EtcdMember {
	t.Helper()
	var seed v1alpha2.EtcdMember
	eventually(t, 4*time.Minute, name+": restore refused with "+reason, func() (bool, string) {
		ms := members(t, ns, name)
		if len(ms) == 0 {
			return false, "no member"
		}
		seed = ms[0]
		r := conditions.Get(seed.Status.Conditions, conditions.Ready)
		p := conditions.Get(getCluster(t, ns, name).Status.Conditions, conditions.Progressing)
		ok := r != nil && r.Reason == conditions.ReasonRestoreFailed && strings.Contains(r.Message, "("+reason+")") &&
			p != nil && p.Reason == conditions.ReasonRestoreFailed && strings.Contains(p.Message, reason)
		return ok, fmt.Sprintf("seed %s; cluster %s", condString(r), condString(p))
	})
	if !eventRecorded(t, ns, conditions.ReasonRestoreFailed, reason) {
		t.Errorf("no %s Event says %s", conditions.ReasonRestoreFailed, reason)
	}
	return seed
}

func restoreFrom(from v1alpha2.SnapshotLocation) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) {
		c.Spec.Bootstrap = &v1alpha2.BootstrapSpec{Restore: &v1alpha2.RestoreSpec{Source: from}}
	}
}

func pvcLocation(claim, subPath string) v1alpha2.SnapshotLocation {
	return v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: claim, SubPath: subPath}}
}

func newClaim(t *testing.T, ns, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	if err := k.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
}

// claimPath is the directory on this machine behind a bound claim (the
// sandbox's volumes are directories).
func claimPath(t *testing.T, ns, claim string) string {
	t.Helper()
	var path string
	eventually(t, time.Minute, "claim "+claim+" bound", func() (bool, string) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: claim}, pvc); err != nil || pvc.Spec.VolumeName == "" {
			return false, fmt.Sprint(err)
		}
		pv := &corev1.PersistentVolume{}
		if err := k.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return false, err.Error()
		}
		switch {
		case pv.Spec.HostPath != nil:
			path = pv.Spec.HostPath.Path
		case pv.Spec.Local != nil:
			path = pv.Spec.Local.Path
		}
		return path != "", "no path"
	})
	return path
}

func newSnapshot(t *testing.T, ns, name, cluster string, to v1alpha2.SnapshotLocation) {
	t.Helper()
	s := &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: cluster}, Destination: to},
	}
	if err := k.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// waitVerified waits until the snapshot's verification ended, and fails
// unless it passed.
func waitVerified(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	var c *metav1.Condition
	eventually(t, timeout, "snapshot "+name+" verified", func() (bool, string) {
		s := &v1alpha2.EtcdSnapshot{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return false, err.Error()
		}
		c = conditions.Get(s.Status.Conditions, conditions.Verified)
		return c != nil && c.Status != metav1.ConditionUnknown, condString(c)
	})
	if c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonVerificationPassed {
		t.Fatalf("snapshot %s: Verified = %s", name, condString(c))
	}
}

// waitSnapshot waits until the snapshot is final, and fails unless it
// reached the phase (and, for a failure, the reason) wanted.
func waitSnapshot(t *testing.T, ns, name string, phase v1alpha2.SnapshotPhase, reason string, timeout time.Duration) *v1alpha2.EtcdSnapshot {
	t.Helper()
	s := &v1alpha2.EtcdSnapshot{}
	eventually(t, timeout, fmt.Sprintf("snapshot %s final", name), func() (bool, string) {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return false, err.Error()
		}
		c := conditions.Get(s.Status.Conditions, conditions.Ready)
		return s.Status.Phase == v1alpha2.SnapshotComplete || s.Status.Phase == v1alpha2.SnapshotFailed,
			fmt.Sprintf("%s %s", s.Status.Phase, condString(c))
	})
	c := conditions.Get(s.Status.Conditions, conditions.Ready)
	if s.Status.Phase != phase || (reason != "" && (c == nil || c.Reason != reason)) {
		t.Fatalf("snapshot %s ended %s (%s), want %s %s", name, s.Status.Phase, condString(c), phase, reason)
	}
	if phase == v1alpha2.SnapshotFailed && !eventRecorded(t, ns, reason, c.Message) {
		t.Errorf("no Warning Event %s saying %q", reason, c.Message)
	}
	return s
}

func checkArtifact(t *testing.T, s *v1alpha2.EtcdSnapshot, uri string) {
	t.Helper()
	a := s.Status.Artifact
	if a == nil || a.URI != uri || a.SizeBytes < 64<<10 || !strings.HasPrefix(a.Checksum, "sha256:") || len(a.Checksum) != 71 || a.EtcdVersion != etcdVersion {
		t.Errorf("snapshot %s artifact %+v, want uri %s, a size, a sha256 and etcd %s", s.Name, a, uri, etcdVersion)
	}
	if c := conditions.Get(s.Status.Conditions, conditions.Ready); c == nil || c.Status != metav1.ConditionTrue || c.Reason != conditions.ReasonSnapshotStored {
		t.Errorf("snapshot %s Ready = %s", s.Name, condString(c))
	}
}

// writeKeys writes n keys data/<i> with distinct values, a few writers at
// once, and returns them.
func writeKeys(t *testing.T, ns, cluster string, n int) map[string]string {
	t.Helper()
	c, err := clusterClient(ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	want := make(map[string]string, n)
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("data/%05d", i)] = fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i%200))
	}
	// In transactions of 100 puts (etcd takes up to 128 operations in
	// one), 16 at a time: one put per request made the 10,000 keys of the
	// snapshot suite take minutes on a loaded machine.
	names := slices.Sorted(maps.Keys(want))
	var g errgroup.Group
	g.SetLimit(16)
	for batch := range slices.Chunk(names, 100) {
		g.Go(func() error {
			ops := make([]clientv3.Op, 0, len(batch))
			for _, key := range batch {
				ops = append(ops, clientv3.OpPut(key, want[key]))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := c.Txn(ctx).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return want
}

// readKeys reads every data/ key of the cluster.
func readKeys(t *testing.T, ns, cluster string) map[string]string {
	t.Helper()
	c, err := clusterClient(ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.Get(ctx, "data/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got
}

func firstDifference(got, want map[string]string) string {
	for k, v := range want {
		if got[k] != v {
			return fmt.Sprintf("%s=%q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			return "unexpected " + k
		}
	}
	return "none"
}
