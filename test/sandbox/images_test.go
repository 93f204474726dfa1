package sandbox_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
)

// TestImageTarball: an image tarball loads into a root filesystem and its
// entrypoint, cmd, env, working dir and user are honoured.
func TestImageTarball(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	file := filepath.Join(t.TempDir(), "image.tar")
	writeImageTarball(t, file, "sandbox.test/loaded:v2")
	refs, err := sb.LoadImage(t.Context(), file)
	if err != nil || len(refs) != 1 || !strings.HasSuffix(refs[0], "sandbox.test/loaded:v2") {
		t.Fatalf("LoadImage = %v, %v", refs, err)
	}
	pod := &corev1.Pod{}
	pod.Name = "loaded"
	pod.Spec.Containers = []corev1.Container{{Name: "main", Image: "sandbox.test/loaded:v2", Args: []string{"id"}}}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, ns, pod)
	waitPod(t, ns, "loaded", 30*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	// The kubelet hands the runtime only the uid of the image's USER, and
	// with no /etc/passwd in the image there is no group for it: gid 0, as
	// on any cluster.
	if out := mustKubectl(t, "logs", "-n", ns, "loaded"); out != "uid=65532 gid=0 groups=[0] cwd=/work\n" {
		t.Errorf("id in the loaded image = %q", out)
	}
}

// writeImageTarball packs the test image as a docker-save tarball whose
// config sets entrypoint, cmd, env, working dir and a non-root user.
func writeImageTarball(t *testing.T, file, ref string) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	bin, err := os.ReadFile(filepath.Join(helperRoot, "bin", "helper"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/helper", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
		{Name: "work/", Typeflag: tar.TypeDir, Mode: 0o777},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bin); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: []string{"/bin/helper"}, Cmd: []string{"sleep"}, Env: []string{"PATH=/bin", "FROM_IMAGE=yes"},
		WorkingDir: "/work", User: "65532:65532",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
}

// TestUnknownImage: a Pod whose image is unknown waits in ErrImagePull /
// ImagePullBackOff with a message naming the image, and starts once the
// image is added.
func TestUnknownImage(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ref := "sandbox.test/late-" + ns + ":v1"
	pod := helperPod("late", []string{"sleep"}, func(p *corev1.Pod) { p.Spec.Containers[0].Image = ref })
	createPod(t, ns, pod)
	waitPod(t, ns, "late", 30*time.Second, "waiting for its image", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Waiting == nil {
			return false
		}
		w := cs[0].State.Waiting
		return (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") && strings.Contains(w.Message, ref)
	})
	waitPod(t, ns, "late", 30*time.Second, "in ImagePullBackOff", func(p *corev1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ImagePullBackOff" && strings.Contains(w.Message, ref)
	})
	if err := sb.AddImage(t.Context(), ref, helperRoot); err != nil {
		t.Fatal(err)
	}
	// The kubelet retries on its image back-off clock, 10 s and growing.
	waitPod(t, ns, "late", time.Minute, "Running once the image exists", running)
}
