package manifest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestImageVolumesSupported(t *testing.T) {
	node := func(name, kubelet, runtime string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: kubelet, ContainerRuntimeVersion: runtime}}}
	}
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		want  bool
		why   string
	}{
		{name: "no node", why: "no node"},
		{name: "containerd 2.4 and kubelet 1.37", nodes: []corev1.Node{node("a", "v1.37.2", "containerd://2.4.2")}, want: true},
		{name: "CRI-O 1.31 and kubelet 1.35", nodes: []corev1.Node{node("a", "v1.35.0", "cri-o://1.31.3")}, want: true},
		{name: "one node on containerd 1.7", nodes: []corev1.Node{node("a", "v1.36.3", "containerd://2.4.2"), node("b", "v1.36.3", "containerd://1.7.27")},
			why: "node b runs container runtime"},
		{name: "containerd 2.0", nodes: []corev1.Node{node("a", "v1.36.3", "containerd://2.0.5")}, why: "node a runs container runtime"},
		{name: "a kubelet older than 1.35 (the feature off by default)", nodes: []corev1.Node{node("a", "v1.34.4", "containerd://2.4.2")}, why: "node a runs kubelet"},
		{name: "a runtime not known", nodes: []corev1.Node{node("a", "v1.37.2", "docker://28.0.1")}, why: "not one known"},
		{name: "versions not reported yet", nodes: []corev1.Node{node("a", "", "")}, why: "node a runs kubelet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := ImageVolumesSupported(tc.nodes)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("got %t (%q), want %t (%q)", got, why, tc.want, tc.why)
			}
		})
	}
}

// With ToolsFromImage the operator's image is the tools volume: no init
// container copies the binary; the guard runs the small etcd-tools binary
// and the restore agent the operator binary, from where they are in the
// image. With the copy both run the copied operator binary.
func TestToolsFromImage(t *testing.T) {
	m := member(restored(v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "e", Bucket: "b", Key: "k",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}}}))
	for _, tc := range []struct {
		fromImage            bool
		inits, guard, binary string
	}{
		{fromImage: false, inits: InstallToolsContainer + "," + RestoreContainer, guard: "/tools/etcd-operator", binary: "/tools/etcd-operator"},
		{fromImage: true, inits: RestoreContainer, guard: "/tools/etcd-tools", binary: "/tools/manager"},
	} {
		pod := Pod(m, PodOptions{OperatorImage: "op:1", InitialClusterState: StateNew, ToolsFromImage: tc.fromImage})
		inits, volume := toolsOf(pod)
		if inits != tc.inits {
			t.Errorf("from image %t: init containers %s, want %s", tc.fromImage, inits, tc.inits)
		}
		guard, restore := pod.Spec.Containers[0].Command[0], pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1].Command[0]
		if guard != tc.guard || restore != tc.binary {
			t.Errorf("from image %t: the guard runs %s, the restore agent %s, want %s and %s", tc.fromImage, guard, restore, tc.guard, tc.binary)
		}
		mounted := volume != nil && volume.Image != nil && volume.Image.Reference == "op:1" && volume.Image.PullPolicy == corev1.PullIfNotPresent
		copied := volume != nil && volume.EmptyDir != nil
		if mounted != tc.fromImage || copied == tc.fromImage {
			t.Errorf("from image %t: the tools volume is %+v", tc.fromImage, volume)
		}
	}
}

// toolsOf returns a Pod's init containers' names and its tools volume.
func toolsOf(pod *corev1.Pod) (string, *corev1.Volume) {
	var inits []string
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, c.Name)
	}
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == toolsVol {
			return strings.Join(inits, ","), &pod.Spec.Volumes[i]
		}
	}
	return strings.Join(inits, ","), nil
}
