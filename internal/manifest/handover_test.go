package manifest

import (
	"bytes"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// A member goes old, trusting, switched, final; each step's Pod mounts
// and trusts what the stage says.
func TestTLSStagesAndTheirPods(t *testing.T) {
	old := &v1alpha2.MemberTLS{ClientServerSecretRef: ref("own-server"), ClientMTLS: true, PeerSecretRef: ref("own-peer"), PeerAllowedHostnames: []string{"old.example"}}
	final := &v1alpha2.MemberTLS{ClientServerSecretRef: ref("c-server-tls"), ClientMTLS: true, PeerSecretRef: ref("c-peer-tls"), PeerAllowedHostnames: []string{"peer.c.ns.svc"}}
	m := &v1alpha2.EtcdMember{Spec: v1alpha2.EtcdMemberSpec{TLS: old}}
	m.Name, m.Namespace = "c-abcde", "ns"
	steps := []struct {
		stage          int
		server, peer   string
		clientCA       string
		peerCA         string
		peerHostnames  []string
		secretsMounted []string
	}{
		{StageOld, "own-server", "own-peer", ClientTLSDir + "/ca.crt", PeerTLSDir + "/ca.crt", []string{"old.example"}, []string{"own-server", "own-peer"}},
		{StageTrusting, "own-server", "own-peer", TrustedCADir + "/" + KeyClientCA, TrustedCADir + "/" + KeyPeerCA, []string{"old.example", "peer.c.ns.svc"}, []string{"own-server", "own-peer", "c-tls-handover"}},
		{StageSwitched, "c-server-tls", "c-peer-tls", TrustedCADir + "/" + KeyClientCA, TrustedCADir + "/" + KeyPeerCA, []string{"old.example", "peer.c.ns.svc"}, []string{"c-server-tls", "c-peer-tls", "c-tls-handover"}},
		{StageFinal, "c-server-tls", "c-peer-tls", ClientTLSDir + "/ca.crt", PeerTLSDir + "/ca.crt", []string{"peer.c.ns.svc"}, []string{"c-server-tls", "c-peer-tls"}},
	}
	for i, s := range steps {
		if i > 0 {
			prev := Pod(m, PodOptions{})
			m.Spec.TLS = NextTLS(m, final, "c-tls-handover")
			if PodTLSCurrent(prev, m) {
				t.Fatalf("step %d: the Pod of the previous stage counts as current", i)
			}
		}
		if got := TLSStage(m, final); got != s.stage {
			t.Fatalf("step %d: stage %d, want %d", i, got, s.stage)
		}
		checkStagePod(t, i, m, []string{"--cert-file=" + ClientTLSDir + "/tls.crt", "--trusted-ca-file=" + s.clientCA, "--peer-trusted-ca-file=" + s.peerCA,
			"--peer-cert-allowed-hostname=" + strings.Join(s.peerHostnames, ",")}, s.secretsMounted)
	}
}

// checkStagePod checks the Pod made from a member at one stage of a
// hand-over: current, with the flags and the Secrets of the stage.
func checkStagePod(t *testing.T, step int, m *v1alpha2.EtcdMember, flags, secrets []string) {
	t.Helper()
	pod := Pod(m, PodOptions{})
	if !PodTLSCurrent(pod, m) {
		t.Errorf("step %d: the Pod made from the member is not current", step)
	}
	cmd := strings.Join(EtcdCommand(m), " ")
	for _, want := range flags {
		if !strings.Contains(cmd, want) {
			t.Errorf("step %d: command %q lacks %q", step, cmd, want)
		}
	}
	var mounted, used []string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			mounted = append(mounted, v.Secret.SecretName)
		}
	}
	for _, u := range MountedSecrets(m) {
		used = append(used, u.Name)
	}
	if !slices.Equal(mounted, secrets) || !slices.Equal(used, secrets) {
		t.Errorf("step %d: Pod mounts %v, MountedSecrets %v, want %v", step, mounted, used, secrets)
	}
}

// A Pod made before the TLS annotation is current while its volumes name
// the member's Secrets; one without the operator's volumes (adopted) too.
func TestPodTLSCurrentWithoutTheAnnotation(t *testing.T) {
	m := &v1alpha2.EtcdMember{Spec: v1alpha2.EtcdMemberSpec{TLS: &v1alpha2.MemberTLS{ClientServerSecretRef: ref("s"), PeerSecretRef: ref("p")}}}
	pod := Pod(m, PodOptions{})
	delete(pod.Annotations, AnnotationTLS)
	if !PodTLSCurrent(pod, m) {
		t.Error("an older Pod on the member's Secrets is not current")
	}
	adopted := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "legacy"}}}}}}
	if !PodTLSCurrent(adopted, m) {
		t.Error("an adopted Pod with the legacy volume names is not current")
	}
	moved := m.DeepCopy()
	moved.Spec.TLS.PeerSecretRef = ref("c-peer-tls")
	if PodTLSCurrent(pod, moved) {
		t.Error("an older Pod mounting another peer Secret is current")
	}
	moved = m.DeepCopy()
	moved.Spec.TLS.TrustedCASecretRef = ref("c-tls-handover")
	if PodTLSCurrent(pod, moved) {
		t.Error("an older Pod is current for a member in a hand-over")
	}
}

// Peer identity while certificates of both sides meet.
func TestTransitionalIdentity(t *testing.T) {
	hosts := func(h ...string) *v1alpha2.MemberTLS { return &v1alpha2.MemberTLS{PeerAllowedHostnames: h} }
	cns := func(c ...string) *v1alpha2.MemberTLS { return &v1alpha2.MemberTLS{PeerAllowedCommonNames: c} }
	for _, c := range []struct {
		name       string
		old, final *v1alpha2.MemberTLS
		h, cn      []string
	}{
		{"hostnames on both sides", hosts("a"), hosts("b"), []string{"a", "b"}, nil},
		{"common names on both sides", cns("x"), cns("x", "y"), nil, []string{"x", "y"}},
		{"old accepted any", hosts(), hosts("b"), nil, nil},
		{"kinds differ", cns("x"), hosts("b"), nil, nil},
	} {
		h, cn := transitionalIdentity(c.old, c.final)
		if !slices.Equal(h, c.h) || !slices.Equal(cn, c.cn) {
			t.Errorf("%s: %v %v, want %v %v", c.name, h, cn, c.h, c.cn)
		}
	}
}

// A bundle only grows, without repeats, and keeps only certificates.
func TestMergeCAs(t *testing.T) {
	block := func(typ, s string) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte(s)}) }
	old, next := block("CERTIFICATE", "old"), block("CERTIFICATE", "new")
	got := MergeCAs(old, append(slices.Clone(old), block("PRIVATE KEY", "k")...), next, next)
	if want := append(slices.Clone(old), next...); !bytes.Equal(got, want) {
		t.Errorf("merged %q, want %q", got, want)
	}
}
