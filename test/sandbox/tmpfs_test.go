package sandbox_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestMemoryEmptyDir: medium Memory is a real tmpfs limited to sizeLimit;
// its data survives a container restart but not the Pod's deletion.
func TestMemoryEmptyDir(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	size := resource.MustParse("1Mi")
	withTmpfs := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "mem", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size},
		}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
	}
	createPod(t, ns, helperPod("mem", []string{"sleep"}, withTmpfs))
	waitPod(t, ns, "mem", 30*time.Second, "Running", running)

	if out, _ := execIn(t, ns, "mem", "/bin/helper", "fstype", "/mem"); strings.TrimSpace(out) != "tmpfs" {
		t.Fatalf("/mem is %q, want tmpfs", out)
	}
	if out, err := execIn(t, ns, "mem", "/bin/helper", "write", "/mem/big", "--bytes", "2097152"); err == nil {
		t.Errorf("writing 2 MiB into a 1 MiB tmpfs succeeded: %s", out)
	}
	if out, err := execIn(t, ns, "mem", "/bin/helper", "rm", "/mem/big"); err != nil {
		t.Fatalf("rm: %v: %s", err, out)
	}
	if out, err := execIn(t, ns, "mem", "/bin/helper", "write", "/mem/data", "kept"); err != nil {
		t.Fatalf("write: %v: %s", err, out)
	}

	if err := sb.Kill(t.Context(), ns, "mem", "main"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "mem", 30*time.Second, "restarted", func(p *corev1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if out, err := execIn(t, ns, "mem", "/bin/helper", "cat", "/mem/data"); err != nil || out != "kept" {
		t.Fatalf("after a container restart /mem/data = %q (%v), want kept", out, err)
	}

	deletePodAndWait(t, ns, "mem")
	createPod(t, ns, helperPod("mem", []string{"sleep"}, withTmpfs))
	waitPod(t, ns, "mem", 30*time.Second, "Running again", running)
	if out, err := execIn(t, ns, "mem", "/bin/helper", "cat", "/mem/data"); err == nil {
		t.Fatalf("a new Pod still sees the old tmpfs data: %q", out)
	}
}
