package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func member(mods ...func(*v1alpha2.EtcdMember)) *v1alpha2.EtcdMember {
	m := &v1alpha2.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: "db-abcde", Namespace: "ns", UID: "u1"},
		Spec: v1alpha2.EtcdMemberSpec{
			ClusterName: "db", Version: "3.6.16", ClusterToken: "tok",
			InitialCluster: "db-abcde=http://db-abcde.db.ns.svc:2380",
			Storage:        v1alpha2.StorageSpec{Size: resource.MustParse("2Gi")},
		},
	}
	for _, f := range mods {
		f(m)
	}
	return m
}

func TestEtcdCommand(t *testing.T) {
	cases := []struct {
		name    string
		member  *v1alpha2.EtcdMember
		want    []string
		notWant []string
	}{
		{
			name:   "plain",
			member: member(),
			want: []string{"etcd", "--name=db-abcde", "--data-dir=/var/lib/etcd",
				"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
				"--advertise-client-urls=http://db-abcde.db.ns.svc:2379",
				"--initial-advertise-peer-urls=http://db-abcde.db.ns.svc:2380",
				"--initial-cluster=db-abcde=http://db-abcde.db.ns.svc:2380", "--initial-cluster-token=tok",
				"--listen-metrics-urls=http://0.0.0.0:2381"},
			notWant: []string{"--initial-cluster-state", "--cert-file", "--peer-auto-tls"},
		},
		{
			name: "options",
			member: member(func(m *v1alpha2.EtcdMember) {
				m.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](1 << 30), AutoCompactionMode: "periodic",
					AutoCompactionRetention: "1h", SnapshotCount: ptr.To[int64](5000)}
			}),
			want: []string{"--quota-backend-bytes=1073741824", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h", "--snapshot-count=5000"},
		},
		{
			name: "mutual client TLS and peer TLS",
			member: member(func(m *v1alpha2.EtcdMember) {
				m.Spec.TLS = &v1alpha2.MemberTLS{ClientServerSecretRef: &corev1.LocalObjectReference{Name: "s"}, ClientMTLS: true,
					PeerSecretRef: &corev1.LocalObjectReference{Name: "p"}}
			}),
			want: []string{"--listen-client-urls=https://0.0.0.0:2379", "--advertise-client-urls=https://db-abcde.db.ns.svc:2379",
				"--initial-advertise-peer-urls=https://db-abcde.db.ns.svc:2380", "--cert-file=/etc/etcd/tls/client/tls.crt",
				"--client-cert-auth=true", "--trusted-ca-file=/etc/etcd/tls/client/ca.crt", "--peer-client-cert-auth=true",
				"--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt"},
		},
		{
			name: "server TLS only",
			member: member(func(m *v1alpha2.EtcdMember) {
				m.Spec.TLS = &v1alpha2.MemberTLS{ClientServerSecretRef: &corev1.LocalObjectReference{Name: "s"}}
			}),
			want:    []string{"--cert-file=/etc/etcd/tls/client/tls.crt", "--listen-peer-urls=http://0.0.0.0:2380"},
			notWant: []string{"--client-cert-auth=true"},
		},
		{
			name: "peer auto TLS and adopted names",
			member: member(func(m *v1alpha2.EtcdMember) {
				m.Spec.TLS = &v1alpha2.MemberTLS{PeerAutoTLS: true}
				m.Annotations = map[string]string{AnnotationHeadlessService: "db-headless", AnnotationDataDirSubPath: "default.etcd"}
			}),
			want: []string{"--peer-auto-tls", "--initial-advertise-peer-urls=https://db-abcde.db-headless.ns.svc:2380",
				"--data-dir=/var/lib/etcd/default.etcd"},
		},
		{
			name: "a bad data dir subpath falls back",
			member: member(func(m *v1alpha2.EtcdMember) {
				m.Annotations = map[string]string{AnnotationDataDirSubPath: "../etc"}
			}),
			want: []string{"--data-dir=/var/lib/etcd"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := EtcdCommand(tc.member)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("missing %s in %v", w, got)
				}
			}
			for _, nw := range tc.notWant {
				for _, g := range got {
					if strings.HasPrefix(g, nw) {
						t.Errorf("unexpected %s in %v", g, got)
					}
				}
			}
		})
	}
}

func TestPod(t *testing.T) {
	m := member(func(m *v1alpha2.EtcdMember) {
		m.Status.IsVoter = true
		m.Spec.AdditionalMetadata = &v1alpha2.AdditionalMetadata{
			Labels:      map[string]string{"team": "a", LabelCluster: "forged", Prefix + "x": "y"},
			Annotations: map[string]string{"note": "n", AnnotationInitialClusterState: StateNew},
		}
	})
	pod := Pod(m, PodOptions{EtcdRepository: "mirror/etcd", InitialClusterState: StateExisting})
	c := pod.Spec.Containers[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"image", c.Image, "mirror/etcd:v3.6.16"},
		{"hostname", pod.Spec.Hostname, "db-abcde"},
		{"subdomain", pod.Spec.Subdomain, "db"},
		{"voter label", pod.Labels[LabelRole], RoleVoter},
		{"user label", pod.Labels["team"], "a"},
		{"operator label wins", pod.Labels[LabelCluster], "db"},
		{"reserved label dropped", pod.Labels[Prefix+"x"], ""},
		{"user annotation", pod.Annotations["note"], "n"},
		{"state annotation cannot be forged", pod.Annotations[AnnotationInitialClusterState], StateExisting},
		{"state from the annotation", c.Env[0].ValueFrom.FieldRef.FieldPath, "metadata.annotations['" + AnnotationInitialClusterState + "']"},
		{"termination message", c.TerminationMessagePolicy, corev1.TerminationMessageFallbackToLogsOnError},
		{"claim", pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, "data-db-abcde"},
		{"owner", pod.OwnerReferences[0].UID, m.UID},
		{"default cpu", c.Resources.Requests.Cpu().String(), "100m"},
		{"runs as nonroot", *pod.Spec.SecurityContext.RunAsUser, int64(65532)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
}

// An adopted member's data belongs to the user its legacy Pod ran as: the
// operator's Pod runs as that user, without an fsGroup (which could not
// make root's 0700 data directory readable on a volume that ignores it).
func TestAdoptedPodRunsAsItsDataOwner(t *testing.T) {
	cases := []struct {
		annotation string
		uid        int64
		nonRoot    bool
		fsGroup    bool
	}{
		{"", etcdUID, true, true},
		{"0", 0, false, false},
		{"1000", 1000, true, false},
		{"-1", etcdUID, true, true},
		{"root", etcdUID, true, true},
	}
	for _, c := range cases {
		m := member(func(m *v1alpha2.EtcdMember) {
			if c.annotation != "" {
				m.Annotations = map[string]string{AnnotationRunAsUser: c.annotation}
			}
		})
		sc := Pod(m, PodOptions{}).Spec.SecurityContext
		if *sc.RunAsUser != c.uid || *sc.RunAsNonRoot != c.nonRoot || (sc.FSGroup != nil) != c.fsGroup || sc.SeccompProfile == nil {
			t.Errorf("annotation %q: security context %+v", c.annotation, sc)
		}
	}
}

func TestMemoryPodUsesTmpfs(t *testing.T) {
	m := member(func(m *v1alpha2.EtcdMember) {
		m.Spec.Storage = v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse("64Mi")}
	})
	v := Pod(m, PodOptions{}).Spec.Volumes[0]
	if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.String() != "64Mi" {
		t.Errorf("data volume = %+v, want a 64Mi tmpfs", v)
	}
}

func TestPDBMinAvailable(t *testing.T) {
	cases := []struct{ voters, replicas, leaving, want int32 }{
		{0, 0, 0, 0}, {1, 1, 0, 1}, {3, 3, 0, 2}, {4, 3, 0, 3}, {5, 5, 0, 3}, {7, 7, 0, 4}, {1, 3, 0, 2}, {3, 1, 0, 2},
		// 5 → 3: one of 5 voters being removed; its Pod still counts as
		// healthy, so one more must stay.
		{5, 3, 1, 4}, {4, 3, 1, 4},
	}
	for _, c := range cases {
		if got := PDBMinAvailable(c.voters, c.replicas, c.leaving); got != c.want {
			t.Errorf("PDBMinAvailable(%d, %d, %d) = %d, want %d", c.voters, c.replicas, c.leaving, got, c.want)
		}
	}
}

func TestClientServiceSelectsVotersOnly(t *testing.T) {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}}
	sel := ClientService(c).Spec.Selector
	if sel[LabelRole] != RoleVoter || sel[LabelCluster] != "db" {
		t.Errorf("client Service selector = %v, want the cluster's voters", sel)
	}
	if _, ok := HeadlessService(c).Spec.Selector[LabelRole]; ok {
		t.Error("the headless Service must select learners too: peers find them by name")
	}
}

func TestMemberTLSOf(t *testing.T) {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	if MemberTLSOf(c) != nil {
		t.Error("plain cluster has member TLS")
	}
	c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
		Client: &v1alpha2.ClientTLS{CertManager: &v1alpha2.ClientCertManager{
			ServerIssuerRef: v1alpha2.IssuerReference{Name: "ca"}, OperatorClientIssuerRef: &v1alpha2.IssuerReference{Name: "ca"}}},
		Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "own-peer"}},
	}
	got := MemberTLSOf(c)
	if got.ClientServerSecretRef.Name != "db-server-tls" || !got.ClientMTLS || got.PeerSecretRef.Name != "own-peer" {
		t.Errorf("MemberTLSOf = %+v", got)
	}
}

func TestInitialClusterIsSorted(t *testing.T) {
	got := InitialCluster(map[string]string{"b": "http://b:2380", "a": "http://a:2380"})
	if got != "a=http://a:2380,b=http://b:2380" {
		t.Errorf("InitialCluster = %s", got)
	}
}
