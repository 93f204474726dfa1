package certmanager

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// Namespace holds the controller, its leader-election Lease and the
	// Secrets ClusterIssuers refer to, as upstream's Helm chart sets it up.
	Namespace = "cert-manager"
	// Name is the Deployment's, ServiceAccount's and RBAC objects' name.
	Name = "cert-manager-controller"
	// healthPort serves /livez and /readyz (upstream's healthz port).
	healthPort = 9403
)

var labels = map[string]string{"app.kubernetes.io/name": "cert-manager", "app.kubernetes.io/component": "controller"}

// Objects are what Install creates besides the CRDs, in creation order.
func Objects(image string) []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ServiceAccount{ObjectMeta: meta()},
		clusterRole(),
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: Name}},
		},
		leaseRole(),
		&rbacv1.RoleBinding{
			ObjectMeta: meta(),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: Name}},
		},
		deployment(image),
	}
}

func meta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels}
}

// clusterRole is the union of upstream's controller-issuers,
// -clusterissuers, -certificates and -approve:cert-manager-io roles (its
// Helm chart, templates/rbac.yaml), plus creating and deleting
// CertificateRequests, which the request and revision managers do.
func clusterRole() *rbacv1.ClusterRole {
	const group = "cert-manager.io"
	read := []string{"get", "list", "watch"}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"issuers", "clusterissuers", "certificates", "certificaterequests"}, Verbs: read},
			{APIGroups: []string{group}, Resources: []string{
				"issuers/status", "clusterissuers/status", "certificates/status", "certificaterequests/status",
				"issuers", "clusterissuers", "certificates",
			}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{group}, Resources: []string{"certificaterequests"}, Verbs: []string{"create", "update", "patch", "delete"}},
			// For clusters that enforce OwnerReferencesPermissionEnforcement.
			{APIGroups: []string{group}, Resources: []string{"certificates/finalizers", "certificaterequests/finalizers"}, Verbs: []string{"update"}},
			// The approver approves requests for this release's issuer types.
			{APIGroups: []string{group}, Resources: []string{"signers"}, Verbs: []string{"approve"},
				ResourceNames: []string{"issuers.cert-manager.io/*", "clusterissuers.cert-manager.io/*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
}

// leaseRole lets the controller hold its leader-election Lease.
func leaseRole() *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: meta(),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{Name}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
}

// deployment runs one controller that leads through a Lease, so two never
// issue at once. It reports ready only once it leads and its informers
// synced, so a rolling update would wait forever for a new Pod that cannot
// lead while the old one holds the Lease: it is replaced with Recreate.
func deployment(image string) *appsv1.Deployment {
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(healthPort)}},
			PeriodSeconds: 2,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: meta(),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
					Containers: []corev1.Container{{
						Name:  "controller",
						Image: image,
						// The sandbox imports the image into every node; there is no registry.
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{
							"--cluster-resource-namespace=" + Namespace,
							"--leader-elect",
							"--leader-election-namespace=" + Namespace,
							"--v=2",
						},
						Ports:          []corev1.ContainerPort{{Name: "health", ContainerPort: healthPort}},
						ReadinessProbe: probe("/readyz"),
						LivenessProbe:  probe("/livez"),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}
