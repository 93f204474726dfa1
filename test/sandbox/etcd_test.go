package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const etcdImage = "quay.io/coreos/etcd:v3.6.16"

// etcdCluster is a static etcd cluster of plain Pods behind a headless
// Service, the way the operator's members find each other.
type etcdCluster struct {
	ns      string
	name    string
	size    int
	storage string // "pvc" or "memory"
}

func (c etcdCluster) member(i int) string { return fmt.Sprintf("%s-%d", c.name, i) }

func (c etcdCluster) peerURL(i int) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:2380", c.member(i), c.name, c.ns)
}

// create makes the Service, the claims and the Pods, and waits until every
// member is Ready.
func (c etcdCluster) create(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.name},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"cluster": c.name},
			Ports:    []corev1.ServicePort{{Name: "client", Port: 2379}, {Name: "peer", Port: 2380}},
		},
	}
	if _, err := k.CoreV1().Services(c.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
	for i := range c.size {
		if c.storage == "pvc" {
			c.createClaim(t, i)
		}
		createPod(t, c.ns, c.pod(i))
	}
	for i := range c.size {
		waitPod(t, c.ns, c.member(i), 90*time.Second, "Ready", ready)
	}
}

func (c etcdCluster) createClaim(t *testing.T, i int) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-" + c.member(i)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := k.CoreV1().PersistentVolumeClaims(c.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim: %v", err)
	}
}

// pod is member i: non-root like the real image, data on a claim or a
// tmpfs, a readiness probe on /health.
func (c etcdCluster) pod(i int) *corev1.Pod {
	var peers []string
	for j := range c.size {
		peers = append(peers, c.member(j)+"="+c.peerURL(j))
	}
	user := int64(65532)
	grace := int64(5)
	vol := corev1.Volume{Name: "data"}
	if c.storage == "pvc" {
		vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + c.member(i)}
	} else {
		size := resource.MustParse("256Mi")
		vol.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.member(i), Labels: map[string]string{"cluster": c.name}},
		Spec: corev1.PodSpec{
			Hostname: c.member(i), Subdomain: c.name, TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &user, RunAsGroup: &user, FSGroup: &user},
			Volumes:         []corev1.Volume{vol},
			Containers: []corev1.Container{{
				Name: "etcd", Image: etcdImage,
				Command: []string{
					"etcd", "--name=" + c.member(i), "--data-dir=/var/lib/etcd/data",
					"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
					"--initial-advertise-peer-urls=" + c.peerURL(i),
					fmt.Sprintf("--advertise-client-urls=http://%s.%s.%s.svc:2379", c.member(i), c.name, c.ns),
					"--initial-cluster=" + strings.Join(peers, ","), "--initial-cluster-token=" + c.ns + "-" + c.name,
					"--initial-cluster-state=new",
				},
				Ports:        []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}, {Name: "peer", ContainerPort: 2380}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("client")}},
					PeriodSeconds: 1, FailureThreshold: 2,
				},
			}},
		},
	}
}

// etcdctl runs etcdctl inside member i through kubectl exec.
func (c etcdCluster) etcdctl(t *testing.T, i int, args ...string) (string, error) {
	t.Helper()
	return execIn(t, c.ns, c.member(i), append([]string{"etcdctl", "--command-timeout=3s"}, args...)...)
}
