package migrate

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// legacy builds a legacy cluster "db" in "ns" with a claim template of 1Gi,
// changed by mods.
func legacy(t *testing.T, mods ...func(spec map[string]any)) *Legacy {
	t.Helper()
	spec := map[string]any{
		"replicas": int64(3),
		"storage": map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{
			"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		}}},
	}
	for _, m := range mods {
		m(spec)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "etcd.aenix.io/v1alpha1", "kind": "EtcdCluster",
		"metadata": map[string]any{"name": "db", "namespace": "ns", "uid": "legacy-uid"},
		"spec":     spec,
	}}
	l, err := ParseLegacy(u)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func liveFacts(mods ...func(*LiveFacts)) LiveFacts {
	f := LiveFacts{Members: 3, Image: "quay.io/coreos/etcd:v3.5.35", PeerTLS: true,
		Args: []string{"etcd", "--auto-compaction-retention=5m", "--snapshot-count=10000", "--quota-backend-bytes=1020054732", "--snapshot-count=20000"}}
	for _, m := range mods {
		m(&f)
	}
	return f
}

func set(path []string, v any) func(map[string]any) {
	return func(spec map[string]any) {
		if err := unstructured.SetNestedField(spec, v, path...); err != nil {
			panic(err)
		}
	}
}

func TestTranslate(t *testing.T) {
	cases := []struct {
		name        string
		legacy      []func(map[string]any)
		live        []func(*LiveFacts)
		version     string
		check       func(t *testing.T, tr *Translation)
		refusal     string
		dropped     []string
		riskContain string
	}{{
		name:  "plain cluster: version from the image, options as etcd runs them, peer auto-TLS kept",
		check: checkPlain,
	}, {
		name:    "emptyDir is refused",
		legacy:  []func(map[string]any){set([]string{"storage", "emptyDir"}, map[string]any{})},
		refusal: "emptyDir",
	}, {
		name:    "auth without server TLS is refused",
		legacy:  []func(map[string]any){set([]string{"security", "enableAuth"}, true)},
		refusal: "clear text",
	}, {
		name:    "client certificates without server TLS are refused",
		legacy:  []func(map[string]any){set([]string{"security", "tls", "clientTrustedCASecret"}, "client-ca"), set([]string{"security", "tls", "clientSecret"}, "op")},
		refusal: "without serverSecret",
	}, {
		name: "every TLS Secret and auth are carried; the CA Secrets are folded into ca.crt",
		legacy: []func(map[string]any){
			set([]string{"security", "enableAuth"}, true),
			set([]string{"security", "tls", "serverSecret"}, "server"),
			set([]string{"security", "tls", "serverTrustedCASecret"}, "server-ca"),
			set([]string{"security", "tls", "clientTrustedCASecret"}, "client-ca"),
			set([]string{"security", "tls", "clientSecret"}, "op"),
			set([]string{"security", "tls", "peerSecret"}, "peer"),
			set([]string{"security", "tls", "peerTrustedCASecret"}, "peer-ca"),
		},
		dropped: []string{"spec.security.tls.serverTrustedCASecret", "spec.security.tls.clientTrustedCASecret", "spec.security.tls.peerTrustedCASecret"},
		check:   checkSecurity,
	}, {
		name:    "a claim template not named data is refused",
		legacy:  []func(map[string]any){set([]string{"storage", "volumeClaimTemplate", "metadata", "name"}, "vol")},
		refusal: "data-<member>",
	}, {
		name:    "an image without a version tag is refused",
		live:    []func(*LiveFacts){func(f *LiveFacts) { f.Image = "registry.local/etcd:latest" }},
		refusal: "no X.Y.Z tag",
	}, {
		name:        "--version overrides the tag",
		live:        []func(*LiveFacts){func(f *LiveFacts) { f.Image = "registry.local/etcd:latest" }},
		version:     "3.5.35",
		check:       checkVersionOverride,
		riskContain: "registry.local/etcd",
	}, {
		name:    "a non-integer quota is refused",
		legacy:  []func(map[string]any){set([]string{"options", "quota-backend-bytes"}, "8G")},
		live:    []func(*LiveFacts){func(f *LiveFacts) { f.Args = nil }},
		refusal: "not an integer",
	}, {
		name: "fields without a place are dropped, each named",
		legacy: []func(map[string]any){
			set([]string{"options", "log-level"}, "debug"),
			set([]string{"podTemplate", "spec", "serviceAccountName"}, "etcd"),
			set([]string{"podTemplate", "spec", "containers"}, []any{
				map[string]any{"name": "etcd", "image": "quay.io/coreos/etcd:v3.5.35", "env": []any{map[string]any{"name": "A", "value": "b"}}},
				map[string]any{"name": "sidecar", "image": "busybox"},
			}),
			set([]string{"serviceTemplate", "metadata", "name"}, "db-client-vip"),
			set([]string{"podDisruptionBudgetTemplate"}, map[string]any{}),
			set([]string{"bootstrap"}, map[string]any{}),
			set([]string{"frobnicate"}, true),
		},
		dropped: []string{
			"spec.options.log-level", "spec.podTemplate.spec.serviceAccountName", "spec.podTemplate.spec.containers[sidecar]",
			"spec.podTemplate.spec.containers[etcd].env", "spec.serviceTemplate", "spec.podDisruptionBudgetTemplate",
			"spec.bootstrap", "spec.frobnicate",
		},
	}, {
		name: "pod template metadata, scheduling and resources are carried",
		legacy: []func(map[string]any){
			set([]string{"podTemplate", "metadata", "labels"}, map[string]any{"team": "storage"}),
			set([]string{"podTemplate", "spec", "imagePullSecrets"}, []any{map[string]any{"name": "pull"}}),
			set([]string{"podTemplate", "spec", "nodeSelector"}, map[string]any{"disk": "ssd"}),
			set([]string{"podTemplate", "spec", "tolerations"}, []any{map[string]any{"key": "dedicated", "operator": "Exists"}}),
			set([]string{"podTemplate", "spec", "priorityClassName"}, "etcd-critical"),
			set([]string{"podTemplate", "spec", "runtimeClassName"}, "runc"),
			set([]string{"podTemplate", "spec", "schedulerName"}, "etcd-scheduler"),
			set([]string{"podTemplate", "spec", "containers"}, []any{map[string]any{"name": "etcd",
				"resources": map[string]any{"requests": map[string]any{"cpu": "250m"}}}}),
		},
		check: checkCarried,
	}, {
		name:        "a replica count unlike etcd's is a risk; the live count wins",
		legacy:      []func(map[string]any){set([]string{"replicas"}, int64(5))},
		riskContain: "starts at 3",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := Translate(legacy(t, tc.legacy...), liveFacts(tc.live...), tc.version)
			checkRefusal(t, tr, tc.refusal)
			checkDropped(t, tr, tc.dropped)
			if tc.riskContain != "" && !strings.Contains(strings.Join(tr.Risks, "\n"), tc.riskContain) {
				t.Errorf("risks %v, want one containing %q", tr.Risks, tc.riskContain)
			}
			if tc.check != nil {
				tc.check(t, tr)
			}
		})
	}
}

func checkSecurity(t *testing.T, tr *Translation) {
	t.Helper()
	c := tr.Cluster
	tl := c.Spec.TLS
	if tl == nil || tl.Client == nil || tl.Peer == nil {
		t.Fatalf("tls %+v", tl)
	}
	if tl.Client.ServerSecretRef.Name != "server" || tl.Client.OperatorClientSecretRef.Name != "op" || tl.Peer.SecretRef.Name != "peer" {
		t.Errorf("tls refs %+v %+v", tl.Client, tl.Peer)
	}
	if c.Annotations[manifest.AnnotationPeerAutoTLS] != "" {
		t.Errorf("peer auto-TLS kept although the peers have a certificate")
	}
	if !manifest.AuthWanted(c) || c.Spec.Auth.RootCredentialsSecretRef.Name != "db-root-credentials" {
		t.Errorf("auth %+v", c.Spec.Auth)
	}
	mt := manifest.MemberTLSOf(c)
	if mt.PeerAutoTLS || !mt.ClientMTLS || mt.PeerSecretRef.Name != "peer" || mt.ClientServerSecretRef.Name != "server" {
		t.Errorf("member TLS %+v", mt)
	}
}

func checkRefusal(t *testing.T, tr *Translation, want string) {
	t.Helper()
	refusals := strings.Join(tr.Refusals, "\n")
	if (want == "") != (refusals == "") || !strings.Contains(refusals, want) {
		t.Errorf("refusals %q, want one containing %q", refusals, want)
	}
}

func checkDropped(t *testing.T, tr *Translation, want []string) {
	t.Helper()
	var dropped []string
	for _, d := range tr.Dropped {
		dropped = append(dropped, d.Field)
	}
	for _, w := range want {
		if !slices.Contains(dropped, w) {
			t.Errorf("dropped %v, want %s among them", dropped, w)
		}
	}
}

func checkPlain(t *testing.T, tr *Translation) {
	s := tr.Cluster.Spec
	if s.Version != "3.5.35" || *s.Replicas != 3 || s.Storage.Size.String() != "1Gi" {
		t.Errorf("spec %+v", s)
	}
	o := s.Options
	if o == nil || *o.QuotaBackendBytes != 1020054732 || *o.SnapshotCount != 20000 || o.AutoCompactionRetention != "5m" {
		t.Errorf("options %+v (the last --snapshot-count wins, as in etcd)", o)
	}
	if tr.Cluster.Annotations[manifest.AnnotationPeerAutoTLS] != "true" || tr.Cluster.Annotations[MigratedFromAnnotation] != "legacy-uid" {
		t.Errorf("annotations %v", tr.Cluster.Annotations)
	}
}

func checkVersionOverride(t *testing.T, tr *Translation) {
	if tr.Cluster.Spec.Version != "3.5.35" {
		t.Errorf("version %s", tr.Cluster.Spec.Version)
	}
}

func checkCarried(t *testing.T, tr *Translation) {
	s := tr.Cluster.Spec
	if s.AdditionalMetadata == nil || s.AdditionalMetadata.Labels["team"] != "storage" {
		t.Errorf("additionalMetadata %+v", s.AdditionalMetadata)
	}
	if len(s.ImagePullSecrets) != 1 || s.Resources.Requests.Cpu().String() != "250m" {
		t.Errorf("pull secrets %v, resources %v", s.ImagePullSecrets, s.Resources)
	}
	if s.NodeSelector["disk"] != "ssd" || len(s.Tolerations) != 1 || s.PriorityClassName != "etcd-critical" ||
		s.RuntimeClassName == nil || *s.RuntimeClassName != "runc" || s.SchedulerName != "etcd-scheduler" {
		t.Errorf("placement not carried: %+v", s.PodSettings)
	}
	if len(tr.Dropped) != 0 {
		t.Errorf("dropped %v", tr.Dropped)
	}
}

// TestPlanMembers: each live member becomes an EtcdMember of the Pod's name
// under the legacy headless Service, with the data under default.etcd and a
// status that lets the operator recognise it at once.
func TestPlanMembers(t *testing.T) {
	l := legacy(t)
	lv := &Live{Legacy: l, ClusterID: 0xabc}
	for i, name := range []string{"db-0", "db-1", "db-2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
		pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("fast"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		}}
		lv.Members = append(lv.Members, LiveMember{Name: name, ID: uint64(i + 1), Pod: pod, PVC: pvc,
			PeerURL: "https://" + name + ".db-headless.ns.svc:2380"})
	}
	// One legacy Pod names its user (a podTemplate override).
	lv.Members[2].Pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
	p := NewPlan(lv, "3.5.35")
	if len(p.Refusals()) != 0 {
		t.Fatalf("refusals %v", p.Refusals())
	}
	for i, want := range []string{"0", "0", "1000"} {
		if got := p.Members[i].Annotations[manifest.AnnotationRunAsUser]; got != want {
			t.Errorf("member %s runs as %q, its legacy Pod ran as %s", p.Members[i].Name, got, want)
		}
	}
	c := p.Cluster
	if c.Status.ClusterID != "0000000000000abc" || c.Status.ClusterToken != "db-ns" || c.Status.Observed == nil || c.Status.Observed.Replicas != 3 {
		t.Errorf("cluster status %+v", c.Status)
	}
	if c.Spec.Storage.Size.String() != "2Gi" || ptr.Deref(c.Spec.Storage.StorageClassName, "") != "fast" {
		t.Errorf("storage from the live claims: %+v", c.Spec.Storage)
	}
	for i, m := range p.Members {
		checkAdoptedMember(t, m, lv.Members[i], c.Status.Observed)
	}
}

func checkAdoptedMember(t *testing.T, m *v1alpha2.EtcdMember, lm LiveMember, target *v1alpha2.ObservedClusterSpec) {
	t.Helper()
	if m.Name != lm.Name || m.Spec.ServiceName != "db-headless" || manifest.MemberDataDir(m) != "/var/lib/etcd/default.etcd" {
		t.Errorf("member %s: service %s, data dir %s", m.Name, m.Spec.ServiceName, manifest.MemberDataDir(m))
	}
	if manifest.PeerURL(m) != lm.PeerURL {
		t.Errorf("member %s renders peer URL %s, etcd knows %s", m.Name, manifest.PeerURL(m), lm.PeerURL)
	}
	if m.Status.MemberID != etcd.FormatID(lm.ID) || !m.Status.IsVoter || m.Status.PodUID != "uid-"+m.Name || m.Status.PVCName != "data-"+m.Name {
		t.Errorf("member %s status %+v", m.Name, m.Status)
	}
	if m.Spec.InitialCluster == "" || m.Spec.ClusterToken != "db-ns" || m.Spec.Bootstrap {
		t.Errorf("member %s spec %+v", m.Name, m.Spec)
	}
	if !manifest.UpToDate(m, target) {
		t.Errorf("member %s is not up to date with the target: the operator would restart it", m.Name)
	}
	if m.Spec.TLS == nil || !m.Spec.TLS.PeerAutoTLS {
		t.Errorf("member %s TLS %+v", m.Name, m.Spec.TLS)
	}
}

// TestAuthRisks: the dry run says when etcd runs without the authentication
// the legacy spec asks for (what an apply stopped inside its auth step
// leaves), and says nothing of it when etcd has it on.
func TestAuthRisks(t *testing.T) {
	members := []LiveMember{{Name: "db-0", ID: 1, PeerURL: "http://db-0.db-headless.ns.svc:2380"}}
	authSpec := set([]string{"security", "enableAuth"}, true)
	for _, tc := range []struct {
		name     string
		l        *Legacy
		on       bool
		want     []string
		wantNone []string
	}{
		{name: "auth asked, on", l: legacy(t, authSpec), on: true, want: []string{"AUTH: "}, wantNone: []string{"AUTH IS OFF"}},
		{name: "auth asked, off", l: legacy(t, authSpec), on: false, want: []string{"AUTH: ", "AUTH IS OFF", "run --apply again"}},
		{name: "not asked, on", l: legacy(t), on: true, want: []string{"auth is on although"}, wantNone: []string{"AUTH"}},
		{name: "not asked, off", l: legacy(t), on: false, wantNone: []string{"AUTH", "auth is on"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			risks := strings.Join(standingRisks(&Live{Legacy: tc.l, Members: members, AuthEnabled: tc.on}), "\n")
			for _, w := range tc.want {
				if !strings.Contains(risks, w) {
					t.Errorf("risks lack %q:\n%s", w, risks)
				}
			}
			for _, w := range tc.wantNone {
				if strings.Contains(risks, w) {
					t.Errorf("risks contain %q:\n%s", w, risks)
				}
			}
		})
	}
}
