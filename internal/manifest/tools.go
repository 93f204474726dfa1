package manifest

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// How member Pods get the operator's binary, which the data guard and the
// restore agent run from (the operator's --tools-volume).
const (
	// ToolsVolumeAuto mounts the operator's image where every node can
	// (ImageVolumesSupported), and copies the binary otherwise.
	ToolsVolumeAuto = "auto"
	// ToolsVolumeImage always mounts the operator's image (an image volume).
	ToolsVolumeImage = "image"
	// ToolsVolumeCopy always copies the binary with an init container.
	ToolsVolumeCopy = "copy"
)

// ToolsVolumes are the values --tools-volume takes.
var ToolsVolumes = []string{ToolsVolumeAuto, ToolsVolumeImage, ToolsVolumeCopy}

// The oldest kubelet that mounts image volumes without a feature gate set
// (ImageVolume, on by default from 1.35), and the oldest container runtimes
// that mount them.
var (
	imageVolumeKubelet  = version.MustParseGeneric("1.35.0")
	imageVolumeRuntimes = map[string]*version.Version{
		"containerd": version.MustParseGeneric("2.1.0"),
		"cri-o":      version.MustParseGeneric("1.31.0"),
	}
)

// ImageVolumesSupported says whether every node can mount an image volume,
// by the versions each reports of its kubelet and container runtime, and if
// not, which node cannot and why. With no node it says no.
func ImageVolumesSupported(nodes []corev1.Node) (bool, string) {
	if len(nodes) == 0 {
		return false, "no node is known"
	}
	for i := range nodes {
		info := nodes[i].Status.NodeInfo
		kubelet, err := version.ParseGeneric(info.KubeletVersion)
		if err != nil || kubelet.LessThan(imageVolumeKubelet) {
			return false, fmt.Sprintf("node %s runs kubelet %q, older than %s or unknown", nodes[i].Name, info.KubeletVersion, imageVolumeKubelet)
		}
		name, v, _ := strings.Cut(info.ContainerRuntimeVersion, "://")
		least, known := imageVolumeRuntimes[name]
		runtime, err := version.ParseGeneric(v)
		if !known || err != nil || runtime.LessThan(least) {
			return false, fmt.Sprintf("node %s runs container runtime %q, not one known to mount image volumes (containerd 2.1, CRI-O 1.31 or newer)",
				nodes[i].Name, info.ContainerRuntimeVersion)
		}
	}
	return true, ""
}
