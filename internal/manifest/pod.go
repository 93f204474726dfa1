package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/dataguard"
)

// Initial cluster states of etcd.
const (
	StateNew      = "new"
	StateExisting = "existing"
)

// ReadinessPath is the etcd endpoint the readiness probe asks: etcd's
// /health, which (not serializable) answers healthy only while the member
// knows a leader and a linearizable read through it succeeds, and which
// leaves the NOSPACE alarm out, so an alarmed cluster keeps serving reads.
const ReadinessPath = "/health?exclude=NOSPACE"

// etcdUID is the non-root user of the etcd container (distroless "nonroot").
const etcdUID = 65532

// PodOptions are the operator-wide settings a member Pod depends on.
type PodOptions struct {
	// EtcdRepository is the etcd image repository; quay.io/coreos/etcd if empty.
	EtcdRepository string
	// InitialClusterState is "new" only for the seed of a cluster that never
	// formed; see AnnotationInitialClusterState.
	InitialClusterState string
	// OperatorImage is this operator's image: it holds the join gate of a
	// joining member (empty: a member's Pod starts only after it joined),
	// and runs the restore agent of a restored cluster's seed.
	OperatorImage string
	// SecretHashes is the AnnotationSecretHashes value of the certificate
	// material the Pod starts with; empty for a member without Secrets.
	SecretHashes string
	// ToolsFromImage mounts the operator's image itself where the data
	// guard and the restore agent run from (an image volume), instead of
	// copying its binary there with an init container: a second or more
	// off every start of a member's Pod. The nodes' kubelets and container
	// runtimes must support image volumes (see ImageVolumesSupported).
	ToolsFromImage bool
	// ForceNewCluster starts etcd with --force-new-cluster: only for the
	// survivor of a recovery under way (see ForceAuthorized).
	ForceNewCluster bool
}

// ForceAuthorized reports whether the member's survivor mark is backed by
// its cluster's recovery record: a recovery forcing a new cluster from
// this member, whose token the mark holds. A mark without it (put by hand,
// or restored from a backup) must never reach a Pod.
func ForceAuthorized(c *v1alpha2.EtcdCluster, m *v1alpha2.EtcdMember) bool {
	mark := m.Annotations[AnnotationForceNewCluster]
	if c == nil || mark == "" {
		return false
	}
	rec := c.Status.Recovery
	return rec != nil && rec.Phase == v1alpha2.RecoveryForcingNewCluster && rec.Survivor != nil &&
		rec.Survivor.Name == m.Name && rec.Token != "" && mark == rec.Token
}

// MemberOwner is the controller reference every object of a member carries.
func MemberOwner(m *v1alpha2.EtcdMember) metav1.OwnerReference {
	return *metav1.NewControllerRef(m, v1alpha2.GroupVersion.WithKind("EtcdMember"))
}

// Pod renders the Pod of a member.
func Pod(m *v1alpha2.EtcdMember, opts PodOptions) *corev1.Pod {
	state := opts.InitialClusterState
	if state == "" {
		state = StateExisting
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.Name,
			Namespace: m.Namespace,
			Labels:    WithExtra(podLabels(m), ExtraLabels(m.Spec.AdditionalMetadata)),
			Annotations: WithExtra(map[string]string{AnnotationInitialClusterState: state, AnnotationTemplateHash: TemplateHash(m)},
				ExtraAnnotations(m.Spec.AdditionalMetadata)),
			OwnerReferences: []metav1.OwnerReference{MemberOwner(m)},
		},
		Spec: corev1.PodSpec{
			Hostname:                     m.Name,
			Subdomain:                    ServiceName(m),
			Affinity:                     affinity(m),
			TopologySpreadConstraints:    spread(m),
			ImagePullSecrets:             m.Spec.ImagePullSecrets,
			Tolerations:                  m.Spec.Tolerations,
			NodeSelector:                 m.Spec.NodeSelector,
			PriorityClassName:            m.Spec.PriorityClassName,
			RuntimeClassName:             m.Spec.RuntimeClassName,
			SchedulerName:                m.Spec.SchedulerName,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext:              podSecurity(m),
			InitContainers:               slices.Concat(joinGate(m, opts), toolsInstall(opts), restoreInitContainers(m, opts)),
			Containers:                   []corev1.Container{etcdContainer(m, opts)},
			Volumes:                      slices.Concat(volumes(m), toolsVolumes(opts), guardVolumes(opts), restoreVolumes(m, opts)),
		},
	}
	if opts.SecretHashes != "" {
		pod.Annotations[AnnotationSecretHashes] = opts.SecretHashes
	}
	if m.Spec.TLS != nil {
		pod.Annotations[AnnotationTLS] = TLSHash(m.Spec.TLS)
	}
	if m.Status.MemberID != "" {
		pod.Annotations[AnnotationMemberID] = m.Status.MemberID
	}
	if opts.ForceNewCluster {
		pod.Annotations[AnnotationForceNewCluster] = "true"
	}
	return pod
}

// AnnotationMemberID on a member Pod is the member's etcd ID once it has run;
// the data guard reads it at every start of the etcd container (see package
// dataguard).
const AnnotationMemberID = Prefix + "member-id"

// guarded wraps etcd's command line in the data guard, which checks the data
// directory and then becomes etcd.
func guarded(m *v1alpha2.EtcdMember, opts PodOptions, c *corev1.Container) {
	if opts.OperatorImage == "" {
		return
	}
	c.Command = append([]string{guardBinary(opts), "guard-data", "--"}, c.Command...)
	c.Env = append(c.Env,
		corev1.EnvVar{Name: dataguard.EnvDataDir, Value: MemberDataDir(m)},
		corev1.EnvVar{Name: dataguard.EnvStateDir, Value: guardStatePath},
		corev1.EnvVar{Name: dataguard.EnvMemberID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: fmt.Sprintf("metadata.annotations['%s']", AnnotationMemberID),
		}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: toolsVol, MountPath: toolsPath, ReadOnly: true},
		corev1.VolumeMount{Name: guardStateVol, MountPath: guardStatePath})
}

// The data guard's state: a directory that lives as long as the Pod.
const (
	guardStateVol  = "guard-state"
	guardStatePath = "/run/etcd-guard"
)

// guardVolumes is the data guard's state directory, when etcd runs through
// the guard.
func guardVolumes(opts PodOptions) []corev1.Volume {
	if opts.OperatorImage == "" {
		return nil
	}
	return []corev1.Volume{{Name: guardStateVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

func podLabels(m *v1alpha2.EtcdMember) map[string]string {
	l := MemberLabels(m.Spec.ClusterName, m.Name)
	if m.Status.IsVoter {
		l[LabelRole] = RoleVoter
	}
	return l
}

func etcdContainer(m *v1alpha2.EtcdMember, opts PodOptions) corev1.Container {
	c := corev1.Container{
		Name:    EtcdContainer,
		Image:   EtcdImage(opts.EtcdRepository, m.Spec.Version),
		Command: EtcdCommand(m),
		Env: []corev1.EnvVar{{
			Name: "ETCD_INITIAL_CLUSTER_STATE",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: fmt.Sprintf("metadata.annotations['%s']", AnnotationInitialClusterState),
			}},
		}, {
			// Empty (etcd ignores it) but on a recovery's survivor.
			Name: "ETCD_FORCE_NEW_CLUSTER",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: fmt.Sprintf("metadata.annotations['%s']", AnnotationForceNewCluster),
			}},
		}},
		Ports: []corev1.ContainerPort{
			{Name: "client", ContainerPort: ClientPort, Protocol: corev1.ProtocolTCP},
			{Name: "peer", ContainerPort: PeerPort, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:    resources(m.Spec.Resources),
		VolumeMounts: volumeMounts(m),
		// etcd writes no termination message; its last log lines (the reason it
		// exited, such as a lost raft log) become one, which the operator reads
		// to tell a lost data directory from a crash.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		ReadinessProbe: &corev1.Probe{
			// Ready means the member serves: it knows a leader and a
			// linearizable read through it succeeds (a ReadIndex round trip
			// to the leader, cheap next to the writes it guards). A member
			// cut off from its peers turns unready within an election
			// timeout and leaves the client Service and the budget's count.
			// (/health?serializable=true would not do: etcd skips the leader
			// check for it, so a member cut off stays healthy.) NOSPACE is
			// left out: with the quota reached etcd refuses writes, but
			// reads, and the membership changes that help, still work. A
			// learner passes too: the client Service selects voters only.
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: ReadinessPath, Port: intstr.FromInt32(MetricsPort),
			}},
			// Short period: the operator waits for readiness between
			// membership steps, so readiness latency is cluster build time.
			InitialDelaySeconds: 0,
			PeriodSeconds:       1,
			TimeoutSeconds:      2,
			FailureThreshold:    3,
		},
		LivenessProbe: &corev1.Probe{
			// Deliberately not quorum-aware: a member without a leader must
			// not be restarted for it.
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(PeerPort)}},
			InitialDelaySeconds: 15,
			PeriodSeconds:       10,
			FailureThreshold:    3,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	// The user's variables after the operator's; CEL keeps them off ETCD_*.
	c.Env = append(c.Env, m.Spec.Env...)
	guarded(m, opts, &c)
	return c
}

// EtcdCommand renders the etcd command line of a member. The initial cluster
// state is not in it: it comes from the environment (see
// AnnotationInitialClusterState).
func EtcdCommand(m *v1alpha2.EtcdMember) []string {
	peerScheme := "http"
	if m.Spec.TLS != nil && (m.Spec.TLS.PeerSecretRef != nil || m.Spec.TLS.PeerAutoTLS) {
		peerScheme = "https"
	}
	clientScheme := "http"
	if clientTLS(m) {
		clientScheme = "https"
	}
	cmd := []string{
		"etcd",
		"--name=" + m.Name,
		"--data-dir=" + MemberDataDir(m),
		fmt.Sprintf("--listen-peer-urls=%s://0.0.0.0:%d", peerScheme, PeerPort),
		fmt.Sprintf("--listen-client-urls=%s://0.0.0.0:%d", clientScheme, ClientPort),
		"--advertise-client-urls=" + ClientURL(m),
		"--initial-advertise-peer-urls=" + PeerURL(m),
		"--initial-cluster=" + InitialClusterOf(m),
		"--initial-cluster-token=" + m.Spec.ClusterToken,
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", MetricsPort),
	}
	cmd = append(cmd, optionFlags(m.Spec.Options, m.Annotations[AnnotationSnapshotCount])...)
	cmd = append(cmd, tlsFlags(m)...)
	return append(cmd, extraFlags(m.Spec.ExtraArgs)...)
}

func clientTLS(m *v1alpha2.EtcdMember) bool {
	return m.Spec.TLS != nil && m.Spec.TLS.ClientServerSecretRef != nil
}

func optionFlags(o *v1alpha2.EtcdOptions, snapshotCount string) []string {
	var out []string
	if snapshotCount != "" {
		// The operator's own override wins over the user's option.
		out = append(out, "--snapshot-count="+snapshotCount)
	}
	if o == nil {
		return out
	}
	if o.QuotaBackendBytes != nil {
		out = append(out, fmt.Sprintf("--quota-backend-bytes=%d", *o.QuotaBackendBytes))
	}
	if o.AutoCompactionMode != "" {
		out = append(out, "--auto-compaction-mode="+string(o.AutoCompactionMode))
	}
	if o.AutoCompactionRetention != "" {
		out = append(out, "--auto-compaction-retention="+o.AutoCompactionRetention)
	}
	if o.SnapshotCount != nil && snapshotCount == "" {
		out = append(out, fmt.Sprintf("--snapshot-count=%d", *o.SnapshotCount))
	}
	if o.HeartbeatInterval != nil {
		out = append(out, fmt.Sprintf("--heartbeat-interval=%d", *o.HeartbeatInterval))
	}
	if o.ElectionTimeout != nil {
		out = append(out, fmt.Sprintf("--election-timeout=%d", *o.ElectionTimeout))
	}
	return out
}

// extraFlags renders spec.extraArgs, sorted by name so the command line is
// the same at every build.
func extraFlags(args map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out = append(out, "--"+k+"="+args[k])
	}
	return out
}

func tlsFlags(m *v1alpha2.EtcdMember) []string {
	t := m.Spec.TLS
	if t == nil {
		return nil
	}
	var out []string
	if t.ClientServerSecretRef != nil {
		out = append(out, "--cert-file="+ClientTLSDir+"/tls.crt", "--key-file="+ClientTLSDir+"/tls.key")
		if t.ClientMTLS {
			ca := ClientTLSDir + "/ca.crt"
			if t.TrustedCASecretRef != nil {
				ca = TrustedCADir + "/" + KeyClientCA
			}
			out = append(out, "--client-cert-auth=true", "--trusted-ca-file="+ca)
		}
	}
	switch {
	case t.PeerSecretRef != nil:
		ca := PeerTLSDir + "/ca.crt"
		if t.TrustedCASecretRef != nil {
			ca = TrustedCADir + "/" + KeyPeerCA
		}
		out = append(out,
			"--peer-cert-file="+PeerTLSDir+"/tls.crt", "--peer-key-file="+PeerTLSDir+"/tls.key",
			"--peer-trusted-ca-file="+ca, "--peer-client-cert-auth=true")
		if len(t.PeerAllowedHostnames) > 0 {
			out = append(out, "--peer-cert-allowed-hostname="+strings.Join(t.PeerAllowedHostnames, ","))
		}
		if len(t.PeerAllowedCommonNames) > 0 {
			out = append(out, "--peer-cert-allowed-cn="+strings.Join(t.PeerAllowedCommonNames, ","))
		}
	case t.PeerAutoTLS:
		out = append(out, "--peer-auto-tls")
	}
	return out
}

func resources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Requests) > 0 || len(r.Limits) > 0 || len(r.Claims) > 0 {
		return r
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}

func volumes(m *v1alpha2.EtcdMember) []corev1.Volume {
	data := corev1.Volume{Name: "data"}
	if m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory {
		size := m.Spec.Storage.Size
		data.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}
	} else {
		data.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PVCName(m.Name)}
	}
	out := []corev1.Volume{data}
	if t := m.Spec.TLS; t != nil {
		if t.ClientServerSecretRef != nil {
			out = append(out, secretVolume("tls-client", t.ClientServerSecretRef.Name))
		}
		if t.PeerSecretRef != nil {
			out = append(out, secretVolume("tls-peer", t.PeerSecretRef.Name))
		}
		if t.TrustedCASecretRef != nil {
			out = append(out, secretVolume("tls-trust", t.TrustedCASecretRef.Name))
		}
	}
	return out
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

func volumeMounts(m *v1alpha2.EtcdMember) []corev1.VolumeMount {
	out := []corev1.VolumeMount{{Name: "data", MountPath: DataDir}}
	if t := m.Spec.TLS; t != nil {
		if t.ClientServerSecretRef != nil {
			out = append(out, corev1.VolumeMount{Name: "tls-client", MountPath: ClientTLSDir, ReadOnly: true})
		}
		if t.PeerSecretRef != nil {
			out = append(out, corev1.VolumeMount{Name: "tls-peer", MountPath: PeerTLSDir, ReadOnly: true})
		}
		if t.TrustedCASecretRef != nil {
			out = append(out, corev1.VolumeMount{Name: "tls-trust", MountPath: TrustedCADir, ReadOnly: true})
		}
	}
	return out
}

// PVC renders the data volume claim of a member.
func PVC(m *v1alpha2.EtcdMember) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            PVCName(m.Name),
			Namespace:       m.Namespace,
			Labels:          WithExtra(MemberLabels(m.Spec.ClusterName, m.Name), ExtraLabels(m.Spec.AdditionalMetadata)),
			Annotations:     WithExtra(nil, ExtraAnnotations(m.Spec.AdditionalMetadata)),
			OwnerReferences: []metav1.OwnerReference{MemberOwner(m)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: m.Spec.Storage.StorageClassName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: m.Spec.Storage.Size,
			}},
		},
	}
}

// podSecurity runs etcd as the operator's non-root user, owning the volume
// through fsGroup; an adopted member's Pod runs as the user its data belongs
// to (AnnotationRunAsUser).
func podSecurity(m *v1alpha2.EtcdMember) *corev1.PodSecurityContext {
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if uid, ok := AdoptedUser(m); ok {
		return &corev1.PodSecurityContext{RunAsUser: ptr.To(uid), RunAsNonRoot: ptr.To(uid != 0), SeccompProfile: seccomp}
	}
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](etcdUID),
		RunAsGroup:     ptr.To[int64](etcdUID),
		FSGroup:        ptr.To[int64](etcdUID),
		SeccompProfile: seccomp,
	}
}

// AdoptedUser returns the user an adopted member's data belongs to, if the
// member carries a valid AnnotationRunAsUser.
func AdoptedUser(m *v1alpha2.EtcdMember) (int64, bool) {
	v, ok := m.Annotations[AnnotationRunAsUser]
	if !ok {
		return 0, false
	}
	uid, err := strconv.ParseInt(v, 10, 64)
	if err != nil || uid < 0 {
		return 0, false
	}
	return uid, true
}

// Members of a cluster spread over nodes, and over zones where nodes carry
// zone labels, unless the cluster says otherwise: a preferred
// anti-affinity by host name when it sets no pod anti-affinity of its own,
// and a zone spread constraint when it sets none. Both only score nodes:
// members that must share a node (nodes down, or fewer nodes than members)
// still schedule. They are not part of the template hash, so an operator
// upgrade restarts nothing; a member's next Pod gets them.
const (
	LabelHostname = "kubernetes.io/hostname"
	LabelZone     = "topology.kubernetes.io/zone"
)

func affinity(m *v1alpha2.EtcdMember) *corev1.Affinity {
	if a := m.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		return a
	}
	a := &corev1.Affinity{}
	if m.Spec.Affinity != nil {
		a = m.Spec.Affinity.DeepCopy()
	}
	a.PodAntiAffinity = &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 100,
		PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: ClusterSelector(m.Spec.ClusterName)},
			TopologyKey:   LabelHostname,
		},
	}}}
	return a
}

func spread(m *v1alpha2.EtcdMember) []corev1.TopologySpreadConstraint {
	if len(m.Spec.TopologySpreadConstraints) > 0 {
		return m.Spec.TopologySpreadConstraints
	}
	return []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: LabelZone, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: ClusterSelector(m.Spec.ClusterName)},
	}}
}
