package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
)

// Verification Jobs.
const (
	// VerifyAgentContainer is the container whose termination message
	// carries the verification's result. It runs in the etcd image of the
	// snapshot's version, for its etcdutl.
	VerifyAgentContainer = "verify-agent"

	verifySourcePath  = "/verify/src"
	verifyScratchPath = "/verify/scratch"
	verifyScratchVol  = "scratch"
	verifySourceVol   = "snapshot-data"
)

// VerifyJobName is the verification Job of a snapshot: <snapshot>-verify,
// shortened with a hash when that would not fit a label value.
func VerifyJobName(snapshot string) string {
	name := snapshot + "-verify"
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(snapshot))
	return snapshot[:45] + "-" + hex.EncodeToString(sum[:4]) + "-vrfy"
}

// ArtifactSource is the exact file a stored snapshot is in, as a restore
// source: the destination's bucket or claim, and the key or subPath its
// artifact URI names. It fails when the URI is not under the destination.
func ArtifactSource(s *v1alpha2.EtcdSnapshot) (v1alpha2.SnapshotLocation, error) {
	a := s.Status.Artifact
	if a == nil || a.URI == "" {
		return v1alpha2.SnapshotLocation{}, fmt.Errorf("the snapshot records no stored file")
	}
	if d := s.Spec.Destination.S3; d != nil {
		key, ok := strings.CutPrefix(a.URI, "s3://"+d.Bucket+"/")
		if !ok || key == "" {
			return v1alpha2.SnapshotLocation{}, fmt.Errorf("artifact %s is not in bucket %s", a.URI, d.Bucket)
		}
		src := *d
		src.Key = key
		return v1alpha2.SnapshotLocation{S3: &src}, nil
	}
	if d := s.Spec.Destination.PVC; d != nil {
		sub, ok := strings.CutPrefix(a.URI, "file://"+snapshotDataPath+"/")
		if !ok || sub == "" {
			return v1alpha2.SnapshotLocation{}, fmt.Errorf("artifact %s is not on claim %s", a.URI, d.ClaimName)
		}
		return v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: d.ClaimName, SubPath: sub}}, nil
	}
	return v1alpha2.SnapshotLocation{}, fmt.Errorf("the snapshot has no destination")
}

// VerifyJob renders the Job that proves a stored snapshot restorable: the
// operator binary, copied into the etcd image of the version the snapshot
// was taken from, reads src back, restores it with that etcdutl into
// scratch space and compares it with the artifact's record. pullSecrets are
// the cluster's, for the etcd image.
func VerifyJob(s *v1alpha2.EtcdSnapshot, src v1alpha2.SnapshotLocation, pullSecrets []corev1.LocalObjectReference, operatorImage, etcdRepository string) *batchv1.Job {
	labels := map[string]string{
		LabelName: "etcd", LabelInstance: s.Spec.ClusterRef.Name, LabelManagedBy: ManagedBy,
		LabelCluster: s.Spec.ClusterRef.Name, LabelSnapshot: s.Name, LabelComponent: "snapshot-verify",
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: VerifyJobName(s.Name), Namespace: s.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, v1alpha2.GroupVersion.WithKind("EtcdSnapshot"))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](snapshotRetries),
			ActiveDeadlineSeconds: ptr.To[int64](snapshotDeadline),
			PodFailurePolicy:      agentFailurePolicy(VerifyAgentContainer),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           s.Spec.ServiceAccountName,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					ImagePullSecrets:             pullSecrets,
					SecurityContext:              agentPodSecurity(),
					InitContainers:               toolsInstall(PodOptions{OperatorImage: operatorImage}),
					Containers:                   []corev1.Container{verifyContainer(s, src, etcdRepository)},
					Volumes:                      verifyVolumes(src),
				},
			},
		},
	}
}

// agentFailurePolicy fails the Job at once on the agent's permanent exit
// code (the same inputs would fail the same way), and runs a Pod evicted
// or preempted again: it did not fail.
func agentFailurePolicy(container string) *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To(container), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
			Values: []int32{report.ExitPermanent},
		}},
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
		}},
	}}
}

func verifyContainer(s *v1alpha2.EtcdSnapshot, src v1alpha2.SnapshotLocation, etcdRepository string) corev1.Container {
	mounts := []corev1.VolumeMount{{Name: toolsVol, MountPath: toolsPath, ReadOnly: true}, {Name: verifyScratchVol, MountPath: verifyScratchPath}}
	if src.PVC != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: verifySourceVol, MountPath: verifySourcePath, ReadOnly: true})
	}
	_, token := webIdentityVolume(src)
	mounts = append(mounts, token...)
	return corev1.Container{
		Name:         VerifyAgentContainer,
		Image:        EtcdImage(etcdRepository, s.Status.Artifact.EtcdVersion),
		Command:      []string{toolsBinary(PodOptions{}), "verify-agent"}, // the copy install-tools makes
		Env:          verifyEnv(s, src),
		VolumeMounts: mounts,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			// etcd's index of every key is held while they are counted
			// and hashed: room for a few million keys.
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          agentContainerSecurity(),
	}
}

// verifyEnv tells the agent where the file is and what was recorded of it.
func verifyEnv(s *v1alpha2.EtcdSnapshot, src v1alpha2.SnapshotLocation) []corev1.EnvVar {
	a := s.Status.Artifact
	out := []corev1.EnvVar{
		env(agentenv.EnvScratchDir, verifyScratchPath),
		env(agentenv.EnvEtcdutl, agentenv.DefaultEtcdutlPath),
		env(agentenv.EnvExpectChecksum, a.Checksum),
		env(agentenv.EnvExpectSize, strconv.FormatInt(a.SizeBytes, 10)),
		env(agentenv.EnvExpectRevision, strconv.FormatInt(a.Revision, 10)),
		env(agentenv.EnvExpectCompactRevision, strconv.FormatInt(a.CompactRevision, 10)),
	}
	if a.KeyCount != nil {
		out = append(out, env(agentenv.EnvExpectKeyCount, strconv.FormatInt(*a.KeyCount, 10)))
	}
	if a.KVHash != nil {
		out = append(out, env(agentenv.EnvExpectKVHash, strconv.FormatInt(*a.KVHash, 10)))
	}
	return append(out, locationEnv(src, verifySourcePath)...)
}

func verifyVolumes(src v1alpha2.SnapshotLocation) []corev1.Volume {
	vols := []corev1.Volume{
		{Name: toolsVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// The downloaded copy and the restored data: about twice the
		// snapshot, gone with the Pod.
		{Name: verifyScratchVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if pvc := src.PVC; pvc != nil {
		vols = append(vols, corev1.Volume{Name: verifySourceVol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.ClaimName, ReadOnly: true},
		}})
	}
	token, _ := webIdentityVolume(src)
	return append(vols, token...)
}
