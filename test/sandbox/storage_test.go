package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLocalStorage: a sandbox-local claim is provisioned on the node the
// scheduler picked and pinned there, grows when expanded, is emptied by
// `wipe`, and its directory goes with the claim.
func TestLocalStorage(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	class := "sandbox-local"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "local"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := k.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, helperPod("user", []string{"sleep"}, func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "local"},
		}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "d", MountPath: "/d"}}
	}))
	p := waitPod(t, ns, "user", 60*time.Second, "Running", running)
	pvc, err := k.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := k.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil || fmt.Sprint(pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values) != "["+p.Spec.NodeName+"]" {
		t.Errorf("PV %s is not a local volume pinned to %s: %+v", pv.Name, p.Spec.NodeName, pv.Spec)
	}
	dir := pv.Spec.Local.Path

	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	if _, err := k.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the claim to report 2Gi", func() (bool, string) {
		c, err := k.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "local", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := c.Status.Capacity[corev1.ResourceStorage]
		return got.Cmp(resource.MustParse("2Gi")) == 0, got.String()
	})

	mustKubectl(t, "exec", "-n", ns, "user", "--", "/bin/helper", "write", "/d/member", "data")
	if err := sb.Wipe(ctx, ns, "local"); err != nil {
		t.Fatal(err)
	}
	if out, err := execIn(t, ns, "user", "/bin/helper", "cat", "/d/member"); err == nil {
		t.Errorf("wiped volume still holds %q", out)
	}

	deletePodAndWait(t, ns, "user")
	if err := k.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "local", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the volume and its directory to be deleted", func() (bool, string) {
		_, err := k.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		_, statErr := os.Stat(filepath.Clean(dir))
		return err != nil && os.IsNotExist(statErr), fmt.Sprint(err, statErr)
	})
}
