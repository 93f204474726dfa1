package manifest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
)

// Restore init containers of a restored cluster's seed.
const (
	// InstallToolsContainer copies the operator binary into toolsPath, for
	// the data guard and the restore agent.
	InstallToolsContainer = "install-tools"
	// RestoreContainer runs the restore agent in the etcd image of the
	// member's version, whose etcdutl then writes the data directory.
	RestoreContainer = "restore"

	toolsPath         = "/tools"
	restoreSourcePath = "/restore/src"
	toolsVol          = "operator-tools"
	restoreSourceVol  = "restore-src"
)

// toolsInstall is the init container that copies the operator binary into
// the Pod, where the data guard (the etcd container's entrypoint) and the
// restore agent run it; none without the operator's image, or with the
// image mounted as the tools volume.
func toolsInstall(opts PodOptions) []corev1.Container {
	if opts.OperatorImage == "" || opts.ToolsFromImage {
		return nil
	}
	return []corev1.Container{{
		Name:                     InstallToolsContainer,
		Image:                    opts.OperatorImage,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  []string{OperatorBinary, "install-tools"},
		Env:                      []corev1.EnvVar{env(agentenv.EnvToolsDir, toolsPath)},
		VolumeMounts:             []corev1.VolumeMount{{Name: toolsVol, MountPath: toolsPath}},
		Resources:                agentRequests(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          agentContainerSecurity(),
	}}
}

func agentRequests() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
	}}
}

// toolsVolumes is the volume the operator binary is copied into, or the
// operator's image itself (ToolsFromImage).
func toolsVolumes(opts PodOptions) []corev1.Volume {
	switch {
	case opts.OperatorImage == "":
		return nil
	case opts.ToolsFromImage:
		return []corev1.Volume{{Name: toolsVol, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: opts.OperatorImage, PullPolicy: corev1.PullIfNotPresent,
		}}}}
	}
	return []corev1.Volume{{Name: toolsVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

// toolsBinary is where the operator binary is in the tools volume: its copy,
// or its place in the image.
func toolsBinary(opts PodOptions) string {
	if opts.ToolsFromImage {
		return toolsPath + OperatorBinary
	}
	return toolsPath + "/" + agentenv.ToolName
}

// guardBinary is what runs the data guard: the small etcd-tools binary where
// the operator's image is mounted (it starts in milliseconds and stays
// resident beside etcd at a few MiB), else the copied operator binary,
// which the restore agent needs anyway.
func guardBinary(opts PodOptions) string {
	if opts.ToolsFromImage {
		return toolsPath + ToolsBinary
	}
	return toolsBinary(opts)
}

// restoreInitContainers renders the init container that seeds an empty data
// directory from the member's snapshot, after toolsInstall; none without a
// restore or without the operator image to run the agent from. The agent
// does nothing unless the Pod's initial cluster state is "new": once the
// cluster formed, an empty data directory is a lost member, never a restore.
func restoreInitContainers(m *v1alpha2.EtcdMember, opts PodOptions) []corev1.Container {
	if m.Spec.Restore == nil || opts.OperatorImage == "" {
		return nil
	}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: DataDir}, {Name: toolsVol, MountPath: toolsPath, ReadOnly: true}}
	if m.Spec.Restore.Source.PVC != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: restoreSourceVol, MountPath: restoreSourcePath, ReadOnly: true})
	}
	_, token := webIdentityVolume(m.Spec.Restore.Source)
	mounts = append(mounts, token...)
	restore := corev1.Container{
		Name:                     RestoreContainer,
		Image:                    EtcdImage(opts.EtcdRepository, m.Spec.Version),
		Command:                  []string{toolsBinary(opts), "restore-agent"},
		Env:                      restoreEnv(m),
		VolumeMounts:             mounts,
		Resources:                agentRequests(),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          agentContainerSecurity(),
	}
	return []corev1.Container{restore}
}

func restoreEnv(m *v1alpha2.EtcdMember) []corev1.EnvVar {
	out := []corev1.EnvVar{
		env(agentenv.EnvDataDir, MemberDataDir(m)),
		env(agentenv.EnvMemberName, m.Name),
		env(agentenv.EnvInitialCluster, m.Spec.InitialCluster),
		env(agentenv.EnvClusterToken, m.Spec.ClusterToken),
		env(agentenv.EnvPeerURL, PeerURL(m)),
		env(agentenv.EnvTargetVersion, m.Spec.Version),
		env(agentenv.EnvEtcdutl, agentenv.DefaultEtcdutlPath),
		// The same source etcd reads its state from: the restore happens
		// only while it says "new".
		{Name: agentenv.EnvClusterState, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['" + AnnotationInitialClusterState + "']",
		}}},
	}
	return append(out, locationEnv(m.Spec.Restore.Source, restoreSourcePath)...)
}

// restoreVolumes are the volumes the restore init containers add.
func restoreVolumes(m *v1alpha2.EtcdMember, opts PodOptions) []corev1.Volume {
	if m.Spec.Restore == nil || opts.OperatorImage == "" {
		return nil
	}
	out, _ := webIdentityVolume(m.Spec.Restore.Source)
	if pvc := m.Spec.Restore.Source.PVC; pvc != nil {
		out = append(out, corev1.Volume{Name: restoreSourceVol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.ClaimName, ReadOnly: true},
		}})
	}
	return out
}
