package manifest

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// storedAt is a Complete snapshot of dest whose file is at uri.
func storedAt(dest v1alpha2.SnapshotLocation, uri string, mods ...func(*v1alpha2.SnapshotArtifact)) *v1alpha2.EtcdSnapshot {
	s := snapshotOf(dest)
	s.Spec.Verify = true
	s.Status.Artifact = &v1alpha2.SnapshotArtifact{URI: uri, SizeBytes: 42, Checksum: "sha256:ab", EtcdVersion: "3.6.16",
		Revision: 7, KeyCount: ptr.To[int64](0), KVHash: ptr.To[int64](4000000000), CompactRevision: -1}
	for _, m := range mods {
		m(s.Status.Artifact)
	}
	return s
}

func TestArtifactSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		snap *v1alpha2.EtcdSnapshot
		want v1alpha2.SnapshotLocation
		err  string
	}{
		{name: "S3 object under the prefix", snap: storedAt(toS3, "s3://b/prefix/nightly.db"),
			want: v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "http://minio:9000", Bucket: "b", Key: "prefix/nightly.db",
				CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}, ForcePathStyle: true}}},
		{name: "file on the claim", snap: storedAt(toPVC, "file:///snapshot/data/db/nightly.db"),
			want: v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups", SubPath: "db/nightly.db"}}},
		{name: "another bucket", snap: storedAt(toS3, "s3://other/prefix/nightly.db"), err: "not in bucket b"},
		{name: "not on the claim", snap: storedAt(toPVC, "s3://b/nightly.db"), err: "not on claim backups"},
		{name: "nothing stored", snap: snapshotOf(toS3), err: "no stored file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ArtifactSource(tc.snap)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameSource(t, got, tc.want)
		})
	}
	// The snapshot's own destination is left as it was.
	s := storedAt(toS3, "s3://b/prefix/nightly.db")
	if _, err := ArtifactSource(s); err != nil || s.Spec.Destination.S3.Key != "prefix" {
		t.Errorf("the destination changed: %q (%v)", s.Spec.Destination.S3.Key, err)
	}
}

func TestVerifyJob(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snap     *v1alpha2.EtcdSnapshot
		repo     string
		image    string
		env      map[string]string
		noEnv    []string
		fromKeys map[string]string
		volumes  []string
		mounts   map[string]string
	}{
		{
			name: "S3, all recorded", snap: storedAt(toS3, "s3://b/prefix/nightly.db"), image: "quay.io/coreos/etcd:v3.6.16",
			env: map[string]string{"SNAPSHOT_DEST_KIND": "s3", "S3_BUCKET": "b", "S3_KEY": "prefix/nightly.db", "VERIFY_SCRATCH_DIR": "/verify/scratch",
				"ETCDUTL_PATH": "/usr/local/bin/etcdutl", "EXPECT_CHECKSUM": "sha256:ab", "EXPECT_SIZE_BYTES": "42", "EXPECT_REVISION": "7",
				"EXPECT_KEY_COUNT": "0", "EXPECT_KV_HASH": "4000000000", "EXPECT_COMPACT_REVISION": "-1"},
			noEnv:    []string{"PVC_MOUNT_PATH"},
			fromKeys: map[string]string{"AWS_ACCESS_KEY_ID": "creds/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "creds/AWS_SECRET_ACCESS_KEY"},
			volumes:  []string{"operator-tools", "scratch"},
			mounts:   map[string]string{"operator-tools": "/tools", "scratch": "/verify/scratch"},
		},
		{
			name: "volume, taken before counts were recorded", repo: "mirror/etcd",
			snap: storedAt(toPVC, "file:///snapshot/data/db/nightly.db", func(a *v1alpha2.SnapshotArtifact) {
				a.Revision, a.KeyCount, a.KVHash, a.CompactRevision = 0, nil, nil, 0
			}),
			image:   "mirror/etcd:v3.6.16",
			env:     map[string]string{"SNAPSHOT_DEST_KIND": "pvc", "PVC_MOUNT_PATH": "/verify/src", "PVC_SUBPATH": "db/nightly.db", "EXPECT_CHECKSUM": "sha256:ab"},
			noEnv:   []string{"EXPECT_KEY_COUNT", "EXPECT_KV_HASH", "S3_BUCKET", "AWS_ACCESS_KEY_ID"},
			volumes: []string{"operator-tools", "scratch", "snapshot-data"},
			mounts:  map[string]string{"operator-tools": "/tools", "scratch": "/verify/scratch", "snapshot-data": "/verify/src"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pull := []corev1.LocalObjectReference{{Name: "regcred"}}
			job := VerifyJob(tc.snap, mustSource(t, tc.snap), pull, "op:1", tc.repo)
			spec := job.Spec.Template.Spec
			c := spec.Containers[0]
			if c.Name != VerifyAgentContainer || c.Image != tc.image || !slices.Equal(c.Command, []string{"/tools/etcd-operator", "verify-agent"}) {
				t.Errorf("container %s %s %v", c.Name, c.Image, c.Command)
			}
			checkEnv(t, c, tc.env, tc.noEnv, tc.fromKeys)
			checkVolumes(t, spec, c, tc.volumes, tc.mounts)
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "op:1" || !slices.Equal(spec.ImagePullSecrets, pull) {
				t.Errorf("init containers %+v, pull secrets %v", spec.InitContainers, spec.ImagePullSecrets)
			}
		})
	}
}

// The verification Job is shaped like the snapshot's: one attempt per Pod,
// no retry of a permanent failure, no API credentials, owned by its
// snapshot and in the operator's cache.
func TestVerifyJobShape(t *testing.T) {
	s := storedAt(toS3, "s3://b/prefix/nightly.db")
	job := VerifyJob(s, mustSource(t, s), nil, "op:1", "")
	spec := job.Spec.Template.Spec
	c := spec.Containers[0]
	if job.Name != "nightly-verify" || spec.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(spec.AutomountServiceAccountToken, true) {
		t.Errorf("job %s, restart policy %s, token %v", job.Name, spec.RestartPolicy, spec.AutomountServiceAccountToken)
	}
	rules := job.Spec.PodFailurePolicy.Rules
	if rules[0].Action != batchv1.PodFailurePolicyActionFailJob || *rules[0].OnExitCodes.ContainerName != VerifyAgentContainer {
		t.Errorf("permanent failures are retried: %+v", rules[0])
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageReadFile || c.Resources.Limits.Memory().Value() != 1<<30 {
		t.Errorf("termination message %s, memory limit %s", c.TerminationMessagePolicy, c.Resources.Limits.Memory())
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != "snap-uid" || ref.Kind != "EtcdSnapshot" {
		t.Errorf("owner %+v", ref)
	}
	for _, l := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		if l[LabelManagedBy] != ManagedBy || l[LabelSnapshot] != "nightly" || l[LabelCluster] != "db" || l[LabelComponent] != "snapshot-verify" {
			t.Errorf("labels %v", l)
		}
	}
	long := strings.Repeat("a", 60)
	if n := VerifyJobName(long); len(n) > 63 || n == VerifyJobName(long+"b") {
		t.Errorf("long names: %s", n)
	}
}

func mustSource(t *testing.T, s *v1alpha2.EtcdSnapshot) v1alpha2.SnapshotLocation {
	t.Helper()
	src, err := ArtifactSource(s)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func sameSource(t *testing.T, got, want v1alpha2.SnapshotLocation) {
	t.Helper()
	if want.S3 != nil && (got.S3 == nil || *got.S3 != *want.S3) {
		t.Errorf("source %+v, want %+v", got.S3, want.S3)
	}
	if want.PVC != nil && (got.PVC == nil || *got.PVC != *want.PVC) {
		t.Errorf("source %+v, want %+v", got.PVC, want.PVC)
	}
}

// checkVolumes checks a Pod's volumes (claims only read-only) and where
// the container mounts them.
func checkVolumes(t *testing.T, spec corev1.PodSpec, c corev1.Container, want []string, mounts map[string]string) {
	t.Helper()
	var vols []string
	for _, v := range spec.Volumes {
		vols = append(vols, v.Name)
		if v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly {
			t.Errorf("claim %s is mounted writable", v.PersistentVolumeClaim.ClaimName)
		}
	}
	if !slices.Equal(vols, want) {
		t.Errorf("volumes %v, want %v", vols, want)
	}
	for _, m := range c.VolumeMounts {
		if mounts[m.Name] != m.MountPath {
			t.Errorf("mount %s at %s", m.Name, m.MountPath)
		}
	}
}
