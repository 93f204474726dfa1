package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
)

// Snapshot Jobs and agents.
const (
	// LabelSnapshot names the EtcdSnapshot on its Job and Pod.
	LabelSnapshot = Prefix + "snapshot"
	// LabelSchedule names the EtcdSnapshotSchedule on the snapshots it made.
	LabelSchedule = Prefix + "schedule"
	// AnnotationSnapshotBefore names, on a snapshot the cluster controller
	// took before a change (spec.snapshotBefore), that change.
	AnnotationSnapshotBefore = Prefix + "snapshot-before"
	// AnnotationScheduledAt is the slot a scheduled snapshot was made for.
	AnnotationScheduledAt = Prefix + "scheduled-at"

	// SnapshotAgentContainer is the container whose termination message
	// carries the snapshot's result.
	SnapshotAgentContainer = "snapshot-agent"
	// OperatorBinary is the operator's executable in its image.
	OperatorBinary = "/manager"
	// ToolsBinary is the small executable in the operator's image that
	// member Pods run: the data guard and the join gate (cmd/etcd-tools).
	ToolsBinary = "/etcd-tools"

	snapshotCAPath     = "/etc/etcd/pki/ca"
	snapshotClientPath = "/etc/etcd/pki/client"
	snapshotDataPath   = "/snapshot/data"

	// snapshotAttempts: a transient failure (etcd or the store briefly
	// unreachable) is retried; a permanent one is not (exit code 2).
	snapshotRetries = 2
	// snapshotDeadline bounds a whole snapshot Job.
	snapshotDeadline = 30 * 60
)

// SnapshotJobName is the Job of a snapshot: <snapshot>-snapshot, shortened
// with a hash when that would not fit a label value (Job names become one).
func SnapshotJobName(snapshot string) string {
	name := snapshot + "-snapshot"
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(snapshot))
	return snapshot[:45] + "-" + hex.EncodeToString(sum[:4]) + "-snap"
}

// ClientServiceURL is the client Service's URL, the snapshot agent's
// endpoint: any voter serves a snapshot.
func ClientServiceURL(c *v1alpha2.EtcdCluster) string {
	mt := MemberTLSOf(c)
	secure := mt != nil && mt.ClientServerSecretRef != nil
	return fmt.Sprintf("%s://%s.%s.svc:%d", scheme(secure), ClientServiceName(c.Name), c.Namespace, ClientPort)
}

// OperatorClientSecretName is the Secret of the client certificate the
// operator (and its agents) present to etcd, or "" when the client plane
// needs none.
func OperatorClientSecretName(c *v1alpha2.EtcdCluster) string {
	if c.Spec.TLS == nil || c.Spec.TLS.Client == nil {
		return ""
	}
	t := c.Spec.TLS.Client
	switch {
	case t.OperatorClientSecretRef != nil:
		return t.OperatorClientSecretRef.Name
	case t.CertManager != nil && t.CertManager.OperatorClientIssuerRef != nil:
		return OperatorClientTLSSecretName(c.Name)
	}
	return ""
}

// SnapshotJob renders the Job that streams one snapshot of a cluster to its
// destination. schedule is the schedule that made the snapshot, whose
// retention the agent applies afterwards, or nil.
func SnapshotJob(s *v1alpha2.EtcdSnapshot, c *v1alpha2.EtcdCluster, schedule *v1alpha2.EtcdSnapshotSchedule, image string) *batchv1.Job {
	labels := map[string]string{
		LabelName: "etcd", LabelInstance: c.Name, LabelManagedBy: ManagedBy,
		LabelCluster: c.Name, LabelSnapshot: s.Name, LabelComponent: "snapshot",
	}
	volumes, mounts := snapshotVolumes(s, c)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: SnapshotJobName(s.Name), Namespace: s.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, v1alpha2.GroupVersion.WithKind("EtcdSnapshot"))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](snapshotRetries),
			ActiveDeadlineSeconds: ptr.To[int64](snapshotDeadline),
			PodFailurePolicy:      agentFailurePolicy(SnapshotAgentContainer),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           s.Spec.ServiceAccountName,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					ImagePullSecrets:             ObservedPullSecrets(c),
					SecurityContext:              agentPodSecurity(),
					Containers: []corev1.Container{{
						Name:            SnapshotAgentContainer,
						Image:           image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{OperatorBinary, "snapshot-agent"},
						Env:             snapshotEnv(s, c, schedule),
						VolumeMounts:    mounts,
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
							// Two multipart parts and the process: ample, and
							// a runaway agent is stopped before it hurts the node.
							Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						TerminationMessagePath:   corev1.TerminationMessagePathDefault,
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						SecurityContext:          agentContainerSecurity(),
					}},
					Volumes: volumes,
				},
			},
		},
	}
}

// ObservedPullSecrets are the image pull secrets the cluster's members run
// with.
func ObservedPullSecrets(c *v1alpha2.EtcdCluster) []corev1.LocalObjectReference {
	if c.Status.Observed != nil {
		return c.Status.Observed.ImagePullSecrets
	}
	return c.Spec.ImagePullSecrets
}

func agentPodSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](etcdUID),
		RunAsGroup:     ptr.To[int64](etcdUID),
		FSGroup:        ptr.To[int64](etcdUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func agentContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}}
}

func snapshotEnv(s *v1alpha2.EtcdSnapshot, c *v1alpha2.EtcdCluster, schedule *v1alpha2.EtcdSnapshotSchedule) []corev1.EnvVar {
	out := []corev1.EnvVar{
		env(agentenv.EnvEndpoints, ClientServiceURL(c)),
		env(agentenv.EnvSnapshotName, s.Name),
		env(agentenv.EnvSnapshotUID, string(s.UID)),
		env(agentenv.EnvNamespace, s.Namespace),
		env(agentenv.EnvCluster, c.Name),
	}
	if s.Spec.Compression == v1alpha2.CompressionZstd {
		out = append(out, env(agentenv.EnvCompression, agentenv.CompressionZstd))
	}
	if mt := MemberTLSOf(c); mt != nil && mt.ClientServerSecretRef != nil {
		out = append(out, env(agentenv.EnvCAFile, snapshotCAPath+"/ca.crt"))
		if OperatorClientSecretName(c) != "" {
			out = append(out, env(agentenv.EnvCertFile, snapshotClientPath+"/tls.crt"), env(agentenv.EnvKeyFile, snapshotClientPath+"/tls.key"))
		}
	}
	// Credentials only once the operator has turned auth on: before that
	// etcd has no root user to check them against.
	if a := c.Spec.Auth; a != nil && a.Enabled && a.RootCredentialsSecretRef != nil && c.Status.AuthEnabled {
		out = append(out, env(agentenv.EnvUsername, "root"), secretEnv(agentenv.EnvPassword, a.RootCredentialsSecretRef.Name, "password"))
	}
	out = append(out, locationEnv(s.Spec.Destination, snapshotDataPath)...)
	return append(out, retentionEnv(schedule)...)
}

// retentionEnv tells the agent which schedule the snapshot belongs to and
// which of the schedule's stored snapshots to keep.
func retentionEnv(schedule *v1alpha2.EtcdSnapshotSchedule) []corev1.EnvVar {
	if schedule == nil {
		return nil
	}
	out := []corev1.EnvVar{env(agentenv.EnvScheduleName, schedule.Name), env(agentenv.EnvScheduleUID, string(schedule.UID))}
	r := schedule.Spec.Retention
	if r != nil && r.KeepLast != nil {
		out = append(out, env(agentenv.EnvKeepLast, strconv.Itoa(int(*r.KeepLast))))
	}
	if r != nil && r.MaxAge != "" {
		out = append(out, env(agentenv.EnvMaxAge, r.MaxAge))
	}
	return out
}

// locationEnv tells an agent where a snapshot goes or comes from; a volume
// is mounted at mountPath.
func locationEnv(l v1alpha2.SnapshotLocation, mountPath string) []corev1.EnvVar {
	if s3 := l.S3; s3 != nil {
		out := []corev1.EnvVar{
			env(agentenv.EnvDestKind, agentenv.DestinationS3),
			env(agentenv.EnvS3Endpoint, s3.Endpoint),
			env(agentenv.EnvS3Bucket, s3.Bucket),
			env(agentenv.EnvS3Key, s3.Key),
			env(agentenv.EnvS3Region, s3.Region),
			env(agentenv.EnvS3PathStyle, strconv.FormatBool(s3.ForcePathStyle)),
		}
		// Without a credentials Secret, the agent's AWS credential chain
		// finds them (a workload identity's token file, for one).
		if creds := s3.CredentialsSecretRef.Name; creds != "" {
			out = append(out, secretEnv(agentenv.EnvAccessKey, creds, agentenv.EnvAccessKey),
				secretEnv(agentenv.EnvSecretKey, creds, agentenv.EnvSecretKey))
		}
		if ca := s3.CASecretRef; ca != nil && ca.Name != "" {
			out = append(out, secretEnv(agentenv.EnvS3CABundle, ca.Name, "ca.crt"))
		}
		if s3.StorageClass != "" {
			out = append(out, env(agentenv.EnvS3StorageClass, s3.StorageClass))
		}
		out = append(out, sseEnv(s3.SSE)...)
		return append(out, webIdentityEnv(s3.WebIdentity)...)
	}
	if pvc := l.PVC; pvc != nil {
		return []corev1.EnvVar{
			env(agentenv.EnvDestKind, agentenv.DestinationPVC),
			env(agentenv.EnvPVCMountPath, mountPath),
			env(agentenv.EnvPVCSubPath, pvc.SubPath),
		}
	}
	return nil
}

// sseEnv tells the agent how the store is to encrypt what it writes, and
// gives it the customer's key (which reads need too).
func sseEnv(sse *v1alpha2.S3Encryption) []corev1.EnvVar {
	if sse == nil {
		return nil
	}
	out := []corev1.EnvVar{env(agentenv.EnvS3SSEType, sse.Type)}
	if sse.KMSKeyID != "" {
		out = append(out, env(agentenv.EnvS3SSEKMSKeyID, sse.KMSKeyID))
	}
	if ref := sse.CustomerKeySecretRef; ref != nil && ref.Name != "" {
		out = append(out, secretEnv(agentenv.EnvS3SSECustomerKey, ref.Name, v1alpha2.SSECustomerKeyKey))
	}
	return out
}

// webIdentityEnv points the AWS credential chain at the projected token
// (webIdentityVolume), the role and the STS; nothing without a web identity.
func webIdentityEnv(wi *v1alpha2.S3WebIdentity) []corev1.EnvVar {
	if wi == nil {
		return nil
	}
	out := []corev1.EnvVar{env(agentenv.EnvWebIdentityTokenFile, webIdentityPath+"/"+webIdentityToken)}
	if wi.RoleARN != "" {
		out = append(out, env(agentenv.EnvRoleARN, wi.RoleARN))
	}
	if wi.STSEndpoint != "" {
		out = append(out, env(agentenv.EnvSTSEndpoint, wi.STSEndpoint))
	}
	return out
}

// Where an S3 location's web identity token is projected.
const (
	webIdentityVol   = "s3-web-identity"
	webIdentityPath  = "/var/run/secrets/etcd-operator/s3-web-identity"
	webIdentityToken = "token"
	// webIdentityExpiry is the projected token's lifetime; the kubelet
	// renews it at 80%, long before a snapshot's deadline.
	webIdentityExpiry = 3600
)

// webIdentityVolume is the ServiceAccount token an S3 location's
// webIdentity asks for, projected for its audience, and its mount; none
// without one.
func webIdentityVolume(l v1alpha2.SnapshotLocation) ([]corev1.Volume, []corev1.VolumeMount) {
	if l.S3 == nil || l.S3.WebIdentity == nil {
		return nil, nil
	}
	return []corev1.Volume{{Name: webIdentityVol, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: l.S3.WebIdentity.Audience, ExpirationSeconds: ptr.To[int64](webIdentityExpiry), Path: webIdentityToken,
			}}},
		}}}},
		[]corev1.VolumeMount{{Name: webIdentityVol, MountPath: webIdentityPath, ReadOnly: true}}
}

func snapshotVolumes(s *v1alpha2.EtcdSnapshot, c *v1alpha2.EtcdCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	vols, mounts := webIdentityVolume(s.Spec.Destination)
	if mt := MemberTLSOf(c); mt != nil && mt.ClientServerSecretRef != nil {
		// Only the CA of the server Secret: the agent never sees the
		// server's key.
		vols = append(vols, corev1.Volume{Name: "etcd-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: mt.ClientServerSecretRef.Name, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "etcd-ca", MountPath: snapshotCAPath, ReadOnly: true})
		if name := OperatorClientSecretName(c); name != "" {
			vols = append(vols, secretVolume("etcd-client", name))
			mounts = append(mounts, corev1.VolumeMount{Name: "etcd-client", MountPath: snapshotClientPath, ReadOnly: true})
		}
	}
	if pvc := s.Spec.Destination.PVC; pvc != nil {
		vols = append(vols, corev1.Volume{Name: "snapshot-data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.ClaimName},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: "snapshot-data", MountPath: snapshotDataPath})
	}
	return vols, mounts
}
