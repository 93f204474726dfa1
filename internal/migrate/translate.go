package migrate

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Dropped is a legacy field the new API cannot carry, and why.
type Dropped struct {
	Field string
	Why   string
}

// Translation is what a legacy spec becomes: the new cluster, what could not
// be carried, what changes for users, and what stops the adoption.
type Translation struct {
	Cluster  *v1alpha2.EtcdCluster
	Dropped  []Dropped
	Risks    []string
	Refusals []string
}

// LiveFacts are what the translation needs from the running cluster: the
// spec says what was asked, the Pods say what runs.
type LiveFacts struct {
	// Members is the number of etcd members.
	Members int32
	// Image of the running etcd container.
	Image string
	// Args is the running etcd container's command and arguments.
	Args []string
	// ClaimSize is the largest storage request among the members' claims.
	ClaimSize *resource.Quantity
	// StorageClassName of the members' claims.
	StorageClassName *string
	// PeerTLS is true when the members' peer URLs are https.
	PeerTLS bool
}

// MigratedFromAnnotation on an adopted EtcdCluster names the UID of the
// legacy cluster it was made from; a re-run of the tool recognises its own
// work by it, and refuses a cluster of that name it did not make.
const MigratedFromAnnotation = manifest.Prefix + "migrated-from"

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

// Translate maps a legacy cluster and what runs of it onto a new EtcdCluster.
// version, when not empty, overrides the version read from the image tag.
func Translate(l *Legacy, live LiveFacts, version string) *Translation {
	t := &Translation{}
	c := &v1alpha2.EtcdCluster{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "EtcdCluster"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        l.Name(),
			Namespace:   l.Namespace(),
			Annotations: map[string]string{MigratedFromAnnotation: string(l.Object.GetUID())},
		},
		Spec: v1alpha2.EtcdClusterSpec{Replicas: ptr.To(live.Members)},
	}
	t.Cluster = c
	if live.PeerTLS && !l.peerSecretOn() {
		c.Annotations[manifest.AnnotationPeerAutoTLS] = "true"
	}
	if r := l.Spec.Replicas; r != nil && *r != live.Members {
		t.Risks = append(t.Risks, fmt.Sprintf("spec.replicas is %d but etcd has %d members: the new cluster starts at %d", *r, live.Members, live.Members))
	}
	t.version(live, version)
	t.storage(l, live)
	t.podTemplate(l)
	t.options(l, live)
	t.security(l)
	t.rest(l)
	return t
}

func (t *Translation) drop(field, why string) { t.Dropped = append(t.Dropped, Dropped{field, why}) }

func (t *Translation) version(live LiveFacts, override string) {
	image := live.Image
	if image == "" {
		image = LegacyDefaultImage
	}
	repo, tag := splitImage(image)
	v := strings.TrimPrefix(tag, "v")
	if override != "" {
		if override != v {
			t.Risks = append(t.Risks, fmt.Sprintf("--version %s differs from the running image %s: the operator will roll every member to %s", override, image, override))
		}
		v = override
	}
	if !semver.MatchString(v) {
		t.Refusals = append(t.Refusals, fmt.Sprintf("the etcd image %s has no X.Y.Z tag; pass --version", image))
	}
	t.Cluster.Spec.Version = v
	if repo != manifest.DefaultEtcdRepository {
		t.Risks = append(t.Risks, fmt.Sprintf("the members run %s; Pods the operator creates or restarts use the operator's etcd repository (%s unless --etcd-repository says otherwise)", repo, manifest.DefaultEtcdRepository))
	}
}

// splitImage splits an image reference into repository and tag.
func splitImage(image string) (string, string) {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

func (t *Translation) storage(l *Legacy, live LiveFacts) {
	st := l.Spec.Storage
	if st.EmptyDir != nil {
		t.Refusals = append(t.Refusals, "spec.storage.emptyDir: the data lives in the Pods, so it cannot be handed over in place; migrate by snapshot and restore instead")
		return
	}
	if l.ClaimTemplate() != LegacyClaimTemplate {
		t.Refusals = append(t.Refusals, fmt.Sprintf("spec.storage.volumeClaimTemplate.metadata.name is %q: the claims are %s-<pod>, but a member's claim must be named data-<member>", l.ClaimTemplate(), l.ClaimTemplate()))
	}
	size := st.VolumeClaimTemplate.Spec.Resources.Requests[corev1.ResourceStorage]
	if live.ClaimSize != nil {
		size = *live.ClaimSize
	}
	if size.IsZero() {
		size = resource.MustParse("4Gi")
	}
	t.Cluster.Spec.Storage = v1alpha2.StorageSpec{Size: size, StorageClassName: live.StorageClassName}
	if live.StorageClassName == nil {
		t.Cluster.Spec.Storage.StorageClassName = st.VolumeClaimTemplate.Spec.StorageClassName
	}
	vct := st.VolumeClaimTemplate
	if len(vct.Metadata.Labels) > 0 || len(vct.Metadata.Annotations) > 0 {
		t.drop("spec.storage.volumeClaimTemplate.metadata.{labels,annotations}", "claims get spec.additionalMetadata (the pod template's) instead; the live claims keep theirs")
	}
	if modes := vct.Spec.AccessModes; len(modes) > 0 && !slices.Equal(modes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.drop("spec.storage.volumeClaimTemplate.spec.accessModes", "claims of new members are ReadWriteOnce")
	}
	if vct.Spec.Selector != nil || vct.Spec.VolumeMode != nil || vct.Spec.DataSource != nil || vct.Spec.DataSourceRef != nil {
		t.drop("spec.storage.volumeClaimTemplate.spec.{selector,volumeMode,dataSource}", "no equivalent: claims of new members set only size and class")
	}
}

// carriedPodFields are the pod template fields with a place in the new spec.
var carriedPodFields = []string{"affinity", "topologySpreadConstraints", "imagePullSecrets", "containers",
	"tolerations", "nodeSelector", "priorityClassName", "runtimeClassName", "schedulerName"}

func (t *Translation) podTemplate(l *Legacy) {
	pt := l.Spec.PodTemplate
	if len(pt.Metadata.Labels) > 0 || len(pt.Metadata.Annotations) > 0 {
		t.Cluster.Spec.AdditionalMetadata = &v1alpha2.AdditionalMetadata{Labels: pt.Metadata.Labels, Annotations: pt.Metadata.Annotations}
	}
	s := &t.Cluster.Spec
	s.Affinity = pt.Spec.Affinity
	s.TopologySpreadConstraints = pt.Spec.TopologySpreadConstraints
	s.ImagePullSecrets = pt.Spec.ImagePullSecrets
	s.Tolerations, s.NodeSelector = pt.Spec.Tolerations, pt.Spec.NodeSelector
	s.PriorityClassName, s.RuntimeClassName, s.SchedulerName = pt.Spec.PriorityClassName, pt.Spec.RuntimeClassName, pt.Spec.SchedulerName
	if c := l.etcdContainer(); c != nil {
		s.Resources = c.Resources
	}
	podSpec, _, _ := unstructured.NestedMap(l.Object.Object, "spec", "podTemplate", "spec")
	for _, k := range sortedKeys(podSpec) {
		if !slices.Contains(carriedPodFields, k) {
			t.drop("spec.podTemplate.spec."+k, "the operator builds member Pods itself; the adopted Pods keep it until they are restarted")
		}
	}
	containers, _, _ := unstructured.NestedSlice(l.Object.Object, "spec", "podTemplate", "spec", "containers")
	for _, raw := range containers {
		ctr, _ := raw.(map[string]any)
		name, _ := ctr["name"].(string)
		if name != "etcd" {
			t.drop(fmt.Sprintf("spec.podTemplate.spec.containers[%s]", name), "member Pods run etcd alone; the adopted Pods keep it until they are restarted")
			continue
		}
		for _, k := range sortedKeys(ctr) {
			switch k {
			case "name", "image", "resources":
			default:
				t.drop("spec.podTemplate.spec.containers[etcd]."+k, "the operator renders the etcd container itself; the adopted Pods keep it until they are restarted")
			}
		}
	}
}

// typedOptions are the etcd flags with a typed field in the new spec.
var typedOptions = []string{"quota-backend-bytes", "auto-compaction-mode", "auto-compaction-retention", "snapshot-count"}

// options carries the typed etcd flags as the members run them (the legacy
// operator adds defaults of its own, which the spec does not show), and
// drops the rest of spec.options.
func (t *Translation) options(l *Legacy, live LiveFacts) {
	flags := lastFlags(live.Args)
	for k := range l.Spec.Options {
		if _, ok := flags[k]; !ok && slices.Contains(typedOptions, k) {
			flags[k] = l.Spec.Options[k]
		}
	}
	o := &v1alpha2.EtcdOptions{}
	if v, ok := flags["quota-backend-bytes"]; ok {
		o.QuotaBackendBytes = t.integer("quota-backend-bytes", v)
	}
	if v, ok := flags["auto-compaction-mode"]; ok {
		if v != string(v1alpha2.AutoCompactionPeriodic) && v != string(v1alpha2.AutoCompactionRevision) {
			t.Refusals = append(t.Refusals, fmt.Sprintf("--auto-compaction-mode=%s is neither periodic nor revision", v))
		}
		o.AutoCompactionMode = v1alpha2.AutoCompactionMode(v)
	}
	o.AutoCompactionRetention = flags["auto-compaction-retention"]
	if v, ok := flags["snapshot-count"]; ok {
		o.SnapshotCount = t.integer("snapshot-count", v)
	}
	if *o != (v1alpha2.EtcdOptions{}) {
		t.Cluster.Spec.Options = o
	}
	for _, k := range sortedKeys(l.Spec.Options) {
		if !slices.Contains(typedOptions, k) {
			t.drop("spec.options."+k, "no typed option for it; the adopted Pods keep the flag until they are restarted")
		}
	}
}

func (t *Translation) integer(flag, v string) *int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Refusals = append(t.Refusals, fmt.Sprintf("--%s=%s is not an integer", flag, v))
		return nil
	}
	return &n
}

// lastFlags reads --key=value flags; a repeated flag takes its last value,
// as etcd does.
func lastFlags(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if ok {
			out[k] = v
		}
	}
	return out
}

func (t *Translation) security(l *Legacy) {
	s := l.Spec.Security
	if s == nil {
		return
	}
	tl := s.TLS
	if s.EnableAuth {
		if tl.ServerSecret == "" {
			t.Refusals = append(t.Refusals, "spec.security.enableAuth without spec.security.tls.serverSecret: the operator would send the root password in clear text")
		}
		t.Cluster.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: RootCredentialsSecretName(l.Name())}}
	}
	if tl == (legacyTLS{}) {
		return
	}
	out := &v1alpha2.EtcdClusterTLS{}
	switch {
	case tl.ServerSecret != "":
		out.Client = &v1alpha2.ClientTLS{ServerSecretRef: &corev1.LocalObjectReference{Name: tl.ServerSecret}}
		switch {
		case tl.ClientTrustedCASecret != "" && tl.ClientSecret == "":
			t.Refusals = append(t.Refusals, "spec.security.tls.clientTrustedCASecret without clientSecret: etcd asks for client certificates and the operator would have none to present")
		case tl.ClientTrustedCASecret != "":
			out.Client.OperatorClientSecretRef = &corev1.LocalObjectReference{Name: tl.ClientSecret}
			t.drop("spec.security.tls.clientTrustedCASecret", fmt.Sprintf("its CA is added to ca.crt of %s, which members the operator starts trust client certificates from", tl.ServerSecret))
		case tl.ClientSecret != "":
			t.drop("spec.security.tls.clientSecret", "etcd asks for no client certificate (no clientTrustedCASecret), so the operator presents none")
		}
		if tl.ServerTrustedCASecret != "" {
			t.drop("spec.security.tls.serverTrustedCASecret", fmt.Sprintf("the CA that signed the server certificate is added to ca.crt of %s, which the operator verifies members with", tl.ServerSecret))
		}
	case tl.ClientTrustedCASecret != "" || tl.ClientSecret != "":
		t.Refusals = append(t.Refusals, "spec.security.tls: client certificate settings without serverSecret (client certificates over a plain-text port) have no equivalent")
	case tl.ServerTrustedCASecret != "":
		t.drop("spec.security.tls.serverTrustedCASecret", "the client port is plain text (no serverSecret), so there is no server certificate to verify")
	}
	if tl.PeerSecret != "" {
		out.Peer = &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: tl.PeerSecret}}
		if tl.PeerTrustedCASecret != "" {
			t.drop("spec.security.tls.peerTrustedCASecret", fmt.Sprintf("its CA is added to ca.crt of %s, which members the operator starts verify peers with", tl.PeerSecret))
		}
	} else if tl.PeerTrustedCASecret != "" {
		t.drop("spec.security.tls.peerTrustedCASecret", "without peerSecret the members run --peer-auto-tls, which uses no CA")
	}
	if out.Client != nil || out.Peer != nil {
		t.Cluster.Spec.TLS = out
	}
}

// rest reports the top-level fields with no place in the new spec.
func (t *Translation) rest(l *Legacy) {
	spec, _, _ := unstructured.NestedMap(l.Object.Object, "spec")
	for _, k := range sortedKeys(spec) {
		switch k {
		case "replicas", "options", "podTemplate", "storage", "security":
		case "serviceTemplate":
			t.drop("spec.serviceTemplate", fmt.Sprintf("the operator runs its own client Service %s; the legacy name %s only decides which Service is retired", manifest.ClientServiceName(l.Name()), l.ClientService()))
		case "headlessServiceTemplate":
			t.drop("spec.headlessServiceTemplate", fmt.Sprintf("only its name (%s) is kept: the adopted members' peer URLs live under it", l.HeadlessService()))
		case "podDisruptionBudgetTemplate":
			t.drop("spec.podDisruptionBudgetTemplate", "the operator keeps its own PodDisruptionBudget, a majority of the voters")
		case "bootstrap":
			t.drop("spec.bootstrap", "it applies only when a cluster first forms, and this one formed long ago")
		default:
			t.drop("spec."+k, "unknown to etcd-migrate")
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
