// Package dns deploys the sandbox's cluster DNS: CoreDNS as a Deployment
// in kube-system behind the kube-dns Service, as kubeadm and kind set it up,
// answering the cluster.local zone only. There is no upstream server, so a
// name outside the cluster fails at once instead of leaving the machine.
package dns

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	namespace = "kube-system"
	name      = "coredns"
	// Replicas: two, on different nodes when possible, so stopping one
	// node leaves names resolving.
	replicas = 2
)

var labels = map[string]string{"k8s-app": "kube-dns"}

// Corefile serves cluster.local (Services, Pods, headless names) and the
// reverse zones; records live 5 seconds, so readiness changes show quickly.
const Corefile = `.:53 {
    errors
    health {
        lameduck 2s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        ttl 5
    }
    cache 5
    loadbalance
}
`

// Deploy creates (or leaves in place) CoreDNS's account, role, Corefile,
// Deployment and the kube-dns Service at serviceIP.
func Deploy(ctx context.Context, c kubernetes.Interface, image, serviceIP string) error {
	steps := []func() error{
		func() error {
			_, err := c.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta()}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, clusterRole(), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, clusterRoleBinding(), metav1.CreateOptions{})
			return err
		},
		func() error {
			cm := &corev1.ConfigMap{ObjectMeta: meta(), Data: map[string]string{"Corefile": Corefile}}
			_, err := c.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.AppsV1().Deployments(namespace).Create(ctx, deployment(image), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(namespace).Create(ctx, service(serviceIP), metav1.CreateOptions{})
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("deploying CoreDNS: %w", err)
		}
	}
	return nil
}

// Ready reports whether at least one CoreDNS Pod serves.
func Ready(ctx context.Context, c kubernetes.Interface) (bool, error) {
	d, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return d.Status.ReadyReplicas > 0, nil
}

func meta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
}

func clusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

func clusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
}

func deployment(image string) *appsv1.Deployment {
	n := int32(replicas)
	root := int64(0)
	no := false
	podSpec := corev1.PodSpec{
		ServiceAccountName: name,
		PriorityClassName:  "system-cluster-critical",
		DNSPolicy:          corev1.DNSDefault,
		Tolerations:        []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}},
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname,
			}}},
		}},
		Containers: []corev1.Container{{
			Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Args: []string{"-conf", "/etc/coredns/Corefile"},
			Ports: []corev1.ContainerPort{
				{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("20Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
				PeriodSeconds: 1, FailureThreshold: 2,
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
				PeriodSeconds:    10,
				FailureThreshold: 5,
			},
			// Root only to bind port 53, with no other capability.
			SecurityContext: &corev1.SecurityContext{
				RunAsUser: &root, AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
			},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name},
		}}}},
	}
	return &appsv1.Deployment{
		ObjectMeta: meta(),
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
}

func service(ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Selector:  labels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
}
