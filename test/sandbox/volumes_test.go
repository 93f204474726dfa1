package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAPIDataVolumesAndEnv: secret and configMap volumes (items, modes)
// follow updates of their objects, env comes from valueFrom, and the
// projected service-account token lets an in-cluster client call the API
// server through KUBERNETES_SERVICE_HOST and kubernetes.default.svc.
func TestAPIDataVolumesAndEnv(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Data: map[string][]byte{"tls.crt": []byte("v1"), "unused": []byte("x")}}
	if _, err := k.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"mode": "fast"}}
	if _, err := k.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mode := int32(0o400)
	user := int64(65532)
	createPod(t, ns, helperPod("reader", []string{"sleep"}, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &user, FSGroup: &user}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls", DefaultMode: &mode, Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "certs/server.crt"}},
			}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		}
		c := &p.Spec.Containers[0]
		c.VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/tls"}, {Name: "cfg", MountPath: "/cfg"}}
		c.Env = []corev1.EnvVar{
			{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "URL", Value: "http://$(POD_IP):2379"},
		}
	}))
	p := waitPod(t, ns, "reader", 30*time.Second, "Running", running)

	env := mustKubectl(t, "exec", "-n", ns, "reader", "--", "/bin/helper", "env")
	for _, want := range []string{"MODE=fast", "URL=http://" + p.Status.PodIP + ":2379", "KUBERNETES_SERVICE_HOST="} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	if out := mustKubectl(t, "exec", "-n", ns, "reader", "--", "/bin/helper", "cat", "/tls/certs/server.crt"); out != "v1" {
		t.Errorf("secret item = %q", out)
	}
	if out, err := execIn(t, ns, "reader", "/bin/helper", "cat", "/tls/unused"); err == nil {
		t.Errorf("a key not in items was projected: %q", out)
	}
	secret.Data["tls.crt"] = []byte("v2")
	if _, err := k.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the secret volume to follow the update", func() (bool, string) {
		out, _ := execIn(t, ns, "reader", "/bin/helper", "cat", "/tls/certs/server.crt")
		return out == "v2", out
	})

	for _, args := range [][]string{
		{"/bin/helper", "kube-get", "/api/v1/namespaces/" + ns + "/pods"},
		{"/bin/helper", "kube-get", "/version", "kubernetes.default.svc"},
	} {
		// The default service account may list nothing, but it must be
		// authenticated: 403 means the token worked, 401 it did not. The
		// helper's client gives up after 10 s; a first call can meet a
		// Service route not programmed yet (seen once in make test, with
		// three tiers sharing the cores), so a failed call is tried again.
		waitFor(t, 45*time.Second, fmt.Sprintf("in-cluster call %v", args[2:]), func() (bool, string) {
			out, _ := execIn(t, ns, "reader", args...)
			return strings.Contains(out, "200 OK") || strings.Contains(out, "403 Forbidden"), out
		})
	}
}
