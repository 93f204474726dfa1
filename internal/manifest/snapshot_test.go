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

func snapshotOf(dest v1alpha2.SnapshotLocation) *v1alpha2.EtcdSnapshot {
	return &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "snap-uid"},
		Spec:       v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "db"}, Destination: dest},
	}
}

func clusterWith(mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "c-uid"}, Spec: v1alpha2.EtcdClusterSpec{Version: "3.6.16"}}
	for _, m := range mods {
		m(c)
	}
	return c
}

var (
	toS3 = v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "http://minio:9000", Bucket: "b", Key: "prefix",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}, ForcePathStyle: true}}
	toPVC = v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups", SubPath: "db"}}
)

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func TestSnapshotJob(t *testing.T) {
	mtls := func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{
			ServerSecretRef: &corev1.LocalObjectReference{Name: "srv"}, OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "op"}}}
	}
	auth := func(latched bool) func(c *v1alpha2.EtcdCluster) {
		return func(c *v1alpha2.EtcdCluster) {
			mtls(c)
			c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
			c.Status.AuthEnabled = latched
		}
	}
	cases := []struct {
		name     string
		snap     *v1alpha2.EtcdSnapshot
		cluster  *v1alpha2.EtcdCluster
		env      map[string]string // value "" only checks presence
		noEnv    []string
		volumes  []string
		mounts   map[string]string
		fromKeys map[string]string // env var -> secret/key
	}{
		{
			name: "plain to S3", snap: snapshotOf(toS3), cluster: clusterWith(),
			env: map[string]string{"ETCD_ENDPOINTS": "http://db-client.ns.svc:2379", "SNAPSHOT_NAME": "nightly", "SNAPSHOT_UID": "snap-uid",
				"SNAPSHOT_DEST_KIND": "s3", "S3_ENDPOINT": "http://minio:9000", "S3_BUCKET": "b", "S3_KEY": "prefix", "S3_FORCE_PATH_STYLE": "true"},
			noEnv:    []string{"ETCD_TLS_CA_PATH", "ETCD_USERNAME", "PVC_MOUNT_PATH", "SCHEDULE_UID"},
			fromKeys: map[string]string{"AWS_ACCESS_KEY_ID": "creds/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "creds/AWS_SECRET_ACCESS_KEY"},
		},
		{
			name: "S3 with a private CA and no credentials Secret", cluster: clusterWith(),
			snap: snapshotOf(v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3.internal", Bucket: "b",
				CASecretRef: &corev1.LocalObjectReference{Name: "store-ca"}}}),
			env:      map[string]string{"SNAPSHOT_DEST_KIND": "s3", "S3_ENDPOINT": "https://s3.internal"},
			noEnv:    []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
			fromKeys: map[string]string{"S3_CA_BUNDLE": "store-ca/ca.crt"},
		},
		{
			name: "S3 encrypted with a customer key, in a storage class", cluster: clusterWith(),
			snap: snapshotOf(v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3.internal", Bucket: "b",
				StorageClass: "STANDARD_IA", SSE: &v1alpha2.S3Encryption{Type: "Customer", CustomerKeySecretRef: &corev1.LocalObjectReference{Name: "sse"}}}}),
			env:      map[string]string{"S3_STORAGE_CLASS": "STANDARD_IA", "S3_SSE_TYPE": "Customer"},
			noEnv:    []string{"S3_SSE_KMS_KEY_ID"},
			fromKeys: map[string]string{"S3_SSE_CUSTOMER_KEY": "sse/key"},
		},
		{
			name: "compressed", cluster: clusterWith(),
			snap: func() *v1alpha2.EtcdSnapshot {
				s := snapshotOf(toS3)
				s.Spec.Compression = v1alpha2.CompressionZstd
				return s
			}(),
			env: map[string]string{"SNAPSHOT_COMPRESSION": "zstd"},
		},
		{
			name: "S3 encrypted with a KMS key", cluster: clusterWith(),
			snap: snapshotOf(v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3.internal", Bucket: "b",
				SSE: &v1alpha2.S3Encryption{Type: "KMS", KMSKeyID: "arn:aws:kms:eu-west-1:1:key/k"}}}),
			env:   map[string]string{"S3_SSE_TYPE": "KMS", "S3_SSE_KMS_KEY_ID": "arn:aws:kms:eu-west-1:1:key/k"},
			noEnv: []string{"S3_SSE_CUSTOMER_KEY", "S3_STORAGE_CLASS"},
		},
		{
			name: "mutual TLS to a volume", snap: snapshotOf(toPVC), cluster: clusterWith(mtls),
			env: map[string]string{"ETCD_ENDPOINTS": "https://db-client.ns.svc:2379", "ETCD_TLS_CA_PATH": "/etc/etcd/pki/ca/ca.crt",
				"ETCD_TLS_CERT_PATH": "/etc/etcd/pki/client/tls.crt", "ETCD_TLS_KEY_PATH": "/etc/etcd/pki/client/tls.key",
				"SNAPSHOT_DEST_KIND": "pvc", "PVC_MOUNT_PATH": "/snapshot/data", "PVC_SUBPATH": "db"},
			noEnv:   []string{"S3_BUCKET", "AWS_ACCESS_KEY_ID"},
			volumes: []string{"etcd-ca", "etcd-client", "snapshot-data"},
			mounts:  map[string]string{"etcd-ca": "/etc/etcd/pki/ca", "etcd-client": "/etc/etcd/pki/client", "snapshot-data": "/snapshot/data"},
		},
		{
			name: "auth not yet on: no credentials", snap: snapshotOf(toS3), cluster: clusterWith(auth(false)),
			noEnv:   []string{"ETCD_USERNAME", "ETCD_PASSWORD"},
			volumes: []string{"etcd-ca", "etcd-client"},
			mounts:  map[string]string{"etcd-ca": "/etc/etcd/pki/ca", "etcd-client": "/etc/etcd/pki/client"},
		},
		{
			name: "auth on: root's credentials", snap: snapshotOf(toS3), cluster: clusterWith(auth(true)),
			env:      map[string]string{"ETCD_USERNAME": "root"},
			fromKeys: map[string]string{"ETCD_PASSWORD": "root/password"},
			volumes:  []string{"etcd-ca", "etcd-client"},
			mounts:   map[string]string{"etcd-ca": "/etc/etcd/pki/ca", "etcd-client": "/etc/etcd/pki/client"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := SnapshotJob(tc.snap, tc.cluster, nil, "op:1")
			c := job.Spec.Template.Spec.Containers[0]
			checkEnv(t, c, tc.env, tc.noEnv, tc.fromKeys)
			var vols []string
			for _, v := range job.Spec.Template.Spec.Volumes {
				vols = append(vols, v.Name)
			}
			if !slices.Equal(vols, tc.volumes) {
				t.Errorf("volumes %v, want %v", vols, tc.volumes)
			}
			for _, m := range c.VolumeMounts {
				if tc.mounts[m.Name] != m.MountPath {
					t.Errorf("mount %s at %s", m.Name, m.MountPath)
				}
			}
		})
	}
}

// checkEnv checks a container's variables: values ("" only checks
// presence), absent ones, and ones read from Secret keys (secret/key).
func checkEnv(t *testing.T, c corev1.Container, want map[string]string, absent []string, fromKeys map[string]string) {
	t.Helper()
	env := envOf(c)
	for name, value := range want {
		if got, ok := env[name]; !ok || (value != "" && got.Value != value) {
			t.Errorf("%s = %q, want %q", name, got.Value, value)
		}
	}
	for _, name := range absent {
		if _, ok := env[name]; ok {
			t.Errorf("%s is set", name)
		}
	}
	for name, ref := range fromKeys {
		s := env[name].ValueFrom
		if s == nil || s.SecretKeyRef == nil || s.SecretKeyRef.Name+"/"+s.SecretKeyRef.Key != ref {
			t.Errorf("%s does not come from %s: %+v", name, ref, s)
		}
	}
}

// The Job runs the agent once per attempt, never retries a permanent
// failure, holds no API credentials, and belongs to its snapshot.
func TestSnapshotJobShape(t *testing.T) {
	job := SnapshotJob(snapshotOf(toS3), clusterWith(), nil, "op:1")
	spec := job.Spec.Template.Spec
	c := spec.Containers[0]
	if job.Name != "nightly-snapshot" || c.Name != SnapshotAgentContainer || c.Image != "op:1" ||
		!slices.Equal(c.Command, []string{"/manager", "snapshot-agent"}) {
		t.Errorf("job %s container %s %s %v", job.Name, c.Name, c.Image, c.Command)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(spec.AutomountServiceAccountToken, true) {
		t.Errorf("restart policy %s, token %v", spec.RestartPolicy, spec.AutomountServiceAccountToken)
	}
	rules := job.Spec.PodFailurePolicy.Rules
	if rules[0].Action != batchv1.PodFailurePolicyActionFailJob || !slices.Equal(rules[0].OnExitCodes.Values, []int32{2}) {
		t.Errorf("permanent failures are retried: %+v", rules[0])
	}
	if c.TerminationMessagePath != corev1.TerminationMessagePathDefault || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("termination message %s %s", c.TerminationMessagePath, c.TerminationMessagePolicy)
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != "snap-uid" || ref.Kind != "EtcdSnapshot" {
		t.Errorf("owner %+v", ref)
	}
	for _, obj := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		if obj[LabelManagedBy] != ManagedBy || obj[LabelSnapshot] != "nightly" || obj[LabelCluster] != "db" {
			t.Errorf("labels %v: the operator's cache holds only its own Jobs and Pods", obj)
		}
	}
	if c.Resources.Limits.Memory().Value() != 256<<20 {
		t.Errorf("memory limit %s", c.Resources.Limits.Memory())
	}
}

func TestScheduledSnapshotJobCarriesRetention(t *testing.T) {
	sched := &v1alpha2.EtcdSnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Name: "hourly", UID: "sched-uid"},
		Spec: v1alpha2.EtcdSnapshotScheduleSpec{Retention: &v1alpha2.SnapshotRetention{KeepLast: ptr.To[int32](7), MaxAge: "168h"}}}
	env := envOf(SnapshotJob(snapshotOf(toS3), clusterWith(), sched, "op:1").Spec.Template.Spec.Containers[0])
	for name, want := range map[string]string{"SCHEDULE_NAME": "hourly", "SCHEDULE_UID": "sched-uid", "RETENTION_KEEP_LAST": "7", "RETENTION_MAX_AGE": "168h"} {
		if env[name].Value != want {
			t.Errorf("%s = %q, want %q", name, env[name].Value, want)
		}
	}
}

func TestSnapshotJobNameFitsALabel(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, name := range []string{"s", long, long + "b"} {
		j := SnapshotJobName(name)
		if len(j) > 63 {
			t.Errorf("%s: %d characters", j, len(j))
		}
	}
	if SnapshotJobName(long) == SnapshotJobName(long+"b") {
		t.Error("two long names share a Job name")
	}
}

func restored(from v1alpha2.SnapshotLocation) func(*v1alpha2.EtcdMember) {
	return func(m *v1alpha2.EtcdMember) {
		m.Spec.Bootstrap = true
		m.Spec.Restore = &v1alpha2.RestoreSpec{Source: from}
	}
}

var restoreOpts = PodOptions{OperatorImage: "op:1", EtcdRepository: "reg/etcd"}

func TestRestoreInitContainersFromS3(t *testing.T) {
	pod := Pod(member(restored(v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "e", Bucket: "b", Key: "k/x.db",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}}})), restoreOpts)
	inits := pod.Spec.InitContainers
	if len(inits) != 2 || inits[0].Name != InstallToolsContainer || inits[1].Name != RestoreContainer {
		t.Fatalf("init containers %+v", inits)
	}
	if inits[0].Image != "op:1" || inits[1].Image != "reg/etcd:v3.6.16" || inits[1].Command[0] != "/tools/etcd-operator" {
		t.Errorf("install-tools %s, restore %s %v: the restore must run in the etcd image of the member's version",
			inits[0].Image, inits[1].Image, inits[1].Command)
	}
	checkEnv(t, inits[1], map[string]string{"ETCD_DATA_DIR": "/var/lib/etcd", "ETCD_MEMBER_NAME": "db-abcde",
		"ETCD_INITIAL_CLUSTER": "db-abcde=http://db-abcde.db.ns.svc:2380", "ETCD_INITIAL_CLUSTER_TOKEN": "tok",
		"ETCD_PEER_URLS": "http://db-abcde.db.ns.svc:2380", "ETCD_VERSION": "3.6.16", "S3_KEY": "k/x.db"},
		nil, map[string]string{"AWS_SECRET_ACCESS_KEY": "creds/AWS_SECRET_ACCESS_KEY"})
	if f := envOf(inits[1])["ETCD_INITIAL_CLUSTER_STATE"].ValueFrom; f == nil || !strings.Contains(f.FieldRef.FieldPath, AnnotationInitialClusterState) {
		t.Errorf("the restore does not read the Pod's initial cluster state: %+v", f)
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == toolsVol && v.EmptyDir != nil }) {
		t.Error("no tools volume")
	}
}

func TestRestoreInitContainersFromAVolume(t *testing.T) {
	pod := Pod(member(restored(v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups", SubPath: "db/x.db"}})), restoreOpts)
	checkEnv(t, pod.Spec.InitContainers[1], map[string]string{"PVC_MOUNT_PATH": "/restore/src", "PVC_SUBPATH": "db/x.db"}, []string{"S3_KEY"}, nil)
	ok := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "restore-src" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "backups" && v.PersistentVolumeClaim.ReadOnly
	})
	if !ok {
		t.Errorf("the source claim is not mounted read-only: %+v", pod.Spec.Volumes)
	}
}

func TestNoRestoreNoRestoreContainer(t *testing.T) {
	pod := Pod(member(), restoreOpts)
	// The data, the operator's tools, the data guard's state.
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != InstallToolsContainer || len(pod.Spec.Volumes) != 3 {
		t.Errorf("a member without a restore has init containers %v, volumes %v", pod.Spec.InitContainers, pod.Spec.Volumes)
	}
	if pod := Pod(member(), PodOptions{}); len(pod.Spec.InitContainers) != 0 || len(pod.Spec.Volumes) != 1 {
		t.Errorf("without the operator's image a member has init containers %v, volumes %v", pod.Spec.InitContainers, pod.Spec.Volumes)
	}
}

// The data guard: with the operator's image, etcd starts through the guard,
// which reads the member's recorded ID from the Pod at every start.
func TestEtcdStartsThroughTheDataGuard(t *testing.T) {
	m := member(func(m *v1alpha2.EtcdMember) { m.Status.MemberID = "8e9e05c52164694d" })
	pod := Pod(m, restoreOpts)
	c := pod.Spec.Containers[0]
	if c.Command[0] != "/tools/etcd-operator" || c.Command[1] != "guard-data" || c.Command[2] != "--" || c.Command[3] != "etcd" {
		t.Fatalf("etcd does not start through the guard: %v", c.Command)
	}
	if pod.Annotations[AnnotationMemberID] != "8e9e05c52164694d" {
		t.Errorf("member ID annotation %q", pod.Annotations[AnnotationMemberID])
	}
	checkEnv(t, c, map[string]string{"ETCD_GUARD_DATA_DIR": MemberDataDir(m)}, nil, nil)
	if f := envOf(c)["ETCD_GUARD_MEMBER_ID"].ValueFrom; f == nil || !strings.Contains(f.FieldRef.FieldPath, AnnotationMemberID) {
		t.Errorf("the guard does not read the member ID from the Pod: %+v", f)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == toolsVol && v.ReadOnly }) {
		t.Errorf("the tools are not mounted into etcd's container: %+v", c.VolumeMounts)
	}
	if plain := Pod(m, PodOptions{}).Spec.Containers[0]; plain.Command[0] != "etcd" {
		t.Errorf("without the operator's image etcd starts as %v", plain.Command)
	}
}

// A snapshot that names a ServiceAccount runs its Jobs as that account, for
// a workload identity, still without the API token; one that does not runs
// as the namespace's default.
func TestSnapshotJobsRunAsTheNamedServiceAccount(t *testing.T) {
	s := storedAt(toS3, "s3://b/prefix/nightly.db")
	if sa := SnapshotJob(s, clusterWith(), nil, "op:1").Spec.Template.Spec.ServiceAccountName; sa != "" {
		t.Errorf("no account named, the Job runs as %q", sa)
	}
	s.Spec.ServiceAccountName = "backup-writer"
	for name, spec := range map[string]corev1.PodSpec{
		"snapshot": SnapshotJob(s, clusterWith(), nil, "op:1").Spec.Template.Spec,
		"verify":   VerifyJob(s, mustSource(t, s), nil, "op:1", "").Spec.Template.Spec,
	} {
		if spec.ServiceAccountName != "backup-writer" || ptr.Deref(spec.AutomountServiceAccountToken, true) {
			t.Errorf("%s Job: account %q, API token mounted %v", name, spec.ServiceAccountName, spec.AutomountServiceAccountToken)
		}
	}
}

// TestWebIdentityIsProjected: an S3 location with a web identity gets the
// Pod's ServiceAccount token projected for its audience into each agent
// that reaches the store (the snapshot, its verification, a restore), with
// the SDKs' variables pointing at it, and no static keys.
func TestWebIdentityIsProjected(t *testing.T) {
	loc := v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://minio.backup.svc:9000", Bucket: "b", Key: "db",
		WebIdentity: &v1alpha2.S3WebIdentity{Audience: "sts.minio", RoleARN: "arn:minio:iam:::role/x", STSEndpoint: "https://minio.backup.svc:9000"}}}
	s := storedAt(loc, "s3://b/db/nightly.db")
	snapshot := SnapshotJob(s, clusterWith(), nil, "op:1").Spec.Template.Spec
	verify := VerifyJob(s, mustSource(t, s), nil, "op:1", "").Spec.Template.Spec
	restoreLoc := *loc.S3
	restoreLoc.Key = "db/nightly.db"
	restore := Pod(member(restored(v1alpha2.SnapshotLocation{S3: &restoreLoc})), restoreOpts).Spec
	for name, tc := range map[string]struct {
		spec  corev1.PodSpec
		agent corev1.Container
	}{
		"snapshot": {snapshot, snapshot.Containers[0]},
		"verify":   {verify, verify.Containers[0]},
		"restore":  {restore, restore.InitContainers[1]},
	} {
		var token *corev1.ServiceAccountTokenProjection
		for _, v := range tc.spec.Volumes {
			if v.Name == webIdentityVol && v.Projected != nil && len(v.Projected.Sources) == 1 {
				token = v.Projected.Sources[0].ServiceAccountToken
			}
		}
		if token == nil || token.Audience != "sts.minio" || token.Path != "token" {
			t.Errorf("%s: projected token %+v, want one for audience sts.minio", name, token)
		}
		mounted := slices.ContainsFunc(tc.agent.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == webIdentityVol && m.MountPath == webIdentityPath && m.ReadOnly
		})
		if !mounted {
			t.Errorf("%s: the agent %s does not mount the token: %+v", name, tc.agent.Name, tc.agent.VolumeMounts)
		}
		checkEnv(t, tc.agent, map[string]string{
			"AWS_WEB_IDENTITY_TOKEN_FILE": webIdentityPath + "/token", "AWS_ROLE_ARN": "arn:minio:iam:::role/x",
			"AWS_ENDPOINT_URL_STS": "https://minio.backup.svc:9000",
		}, []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, nil)
	}
	// Without one, nothing is projected.
	plain := SnapshotJob(snapshotOf(toS3), clusterWith(), nil, "op:1").Spec.Template.Spec
	if slices.ContainsFunc(plain.Volumes, func(v corev1.Volume) bool { return v.Name == webIdentityVol }) {
		t.Error("a location without a web identity got a projected token")
	}
}
