// Package prometheus installs a Prometheus into the sandbox that scrapes the
// operator and its etcd members as the chart's own monitors say: the
// chart's ServiceMonitor, PodMonitor and PrometheusRule, rendered for the
// operator's release, are turned into Prometheus's configuration (package
// promconfig), since the sandbox has no Prometheus Operator to read them.
// Prometheus runs as a Deployment in namespace monitoring, with its
// ServiceAccount bound to the chart's metrics-reader role, and serves its UI
// and API on its Service, which the host reaches directly.
package prometheus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/test/infra/promconfig"
)

const (
	// Namespace and Name of everything Prometheus runs as.
	Namespace = "monitoring"
	Name      = "prometheus"
	// Port is where Prometheus serves, in its Pod and on its Service.
	Port = 9090
	// tokenFile is the Pod's own ServiceAccount token.
	tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	configDir = "/etc/prometheus"
)

// Release names the operator's Helm release Prometheus watches.
type Release struct {
	Name, Namespace string
	// Values are the values it was installed with, if any besides the
	// defaults (the monitors follow them: metrics.secure,
	// manager.watchNamespaces).
	Values map[string]any
}

// MonitoringValues are the values the chart's monitors are rendered with
// for the sandbox's Prometheus: every monitor on, scraping every 15 s.
func MonitoringValues(r Release) map[string]any {
	v := map[string]any{}
	for k, val := range r.Values {
		v[k] = val
	}
	v["monitoring"] = map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "interval": "15s"},
		"podMonitor":     map[string]any{"enabled": true, "interval": "15s"},
		"prometheusRule": map[string]any{"enabled": true},
	}
	return v
}

// Objects are what Install creates, from the chart's objects rendered with
// MonitoringValues, for the Prometheus image.
func Objects(rendered []*unstructured.Unstructured, image string) ([]client.Object, error) {
	cfg, err := promconfig.Translate(rendered, promconfig.Options{RuleFile: configDir + "/rules.yaml", Interval: "15s"})
	if err != nil {
		return nil, fmt.Errorf("the chart's monitors: %w", err)
	}
	if len(cfg.Jobs) != 2 {
		return nil, fmt.Errorf("the chart rendered the scrape jobs %v, want a ServiceMonitor's and a PodMonitor's", cfg.Jobs)
	}
	reader := ""
	for _, o := range rendered {
		if o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-metrics-reader") {
			reader = o.GetName()
		}
	}
	if reader == "" {
		return nil, fmt.Errorf("the chart rendered no metrics-reader ClusterRole")
	}
	data := map[string]string{"prometheus.yaml": string(cfg.Prometheus), "rules.yaml": string(cfg.Rules)}
	sum := sha256.Sum256([]byte(data["prometheus.yaml"] + data["rules.yaml"]))
	labels := map[string]string{"app.kubernetes.io/name": Name}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: labels}
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: Name}}
	read := []string{"get", "list", "watch"}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ServiceAccount{ObjectMeta: meta(Name)},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-prometheus", Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods", "services", "endpoints", "namespaces"}, Verbs: read},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-prometheus", Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandbox-prometheus"},
			Subjects:   subject,
		},
		// What the chart asks of a scraper of the operator's secure metrics.
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-prometheus-metrics-reader", Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
			Subjects:   subject,
		},
		&corev1.ConfigMap{ObjectMeta: meta(Name), Data: data},
		deployment(meta(Name), labels, image, hex.EncodeToString(sum[:8])),
		&corev1.Service{
			ObjectMeta: meta(Name),
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
				Name: "http", Port: Port, TargetPort: intstr.FromString("http"),
			}}},
		},
	}, nil
}

// deployment runs one Prometheus, its data in an emptyDir; the pod
// template carries the configuration's hash, so a changed one rolls it.
func deployment(meta metav1.ObjectMeta, labels map[string]string, image, configHash string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"sandbox.etcd-operator.cozystack.io/config": configHash}},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					Containers: []corev1.Container{{
						Name: Name, Image: image, ImagePullPolicy: corev1.PullNever,
						Args: []string{
							"--config.file=" + configDir + "/prometheus.yaml", "--storage.tsdb.path=/prometheus",
							"--storage.tsdb.retention.time=1d", fmt.Sprintf("--web.listen-address=:%d", Port),
						},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: Port}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/-/ready", Port: intstr.FromString("http")}},
							PeriodSeconds: 2,
						},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
						}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: configDir, ReadOnly: true},
							{Name: "data", MountPath: "/prometheus"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: meta.Name},
						}}},
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
}

// Install creates the objects, or updates them to these (a second install
// with another chart or release replaces the configuration). It does not
// wait; Ready says when Prometheus serves.
func Install(ctx context.Context, cfg *rest.Config, objects []client.Object) error {
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return err
	}
	for _, obj := range objects {
		err := c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			err = update(ctx, c, obj)
		}
		if err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// update writes obj over the object of its name, keeping what the API
// server owns (its resourceVersion; a Service's cluster IP).
func update(ctx context.Context, c client.Client, obj client.Object) error {
	if _, ok := obj.(*corev1.Namespace); ok {
		return nil
	}
	have := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), have); err != nil {
		return err
	}
	obj.SetResourceVersion(have.GetResourceVersion())
	if svc, ok := obj.(*corev1.Service); ok {
		old := have.(*corev1.Service)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
	}
	return c.Update(ctx, obj)
}

// Ready reports whether Prometheus's Deployment has a ready Pod of its
// latest template, and the URL of its Service; what is missing when not.
func Ready(ctx context.Context, cfg *rest.Config) (bool, string, error) {
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return false, "", err
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: Name}, &d); err != nil {
		return false, "", err
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < 1 || d.Status.ReadyReplicas < 1 || d.Status.Replicas != d.Status.UpdatedReplicas {
		return false, fmt.Sprintf("Deployment %s/%s has %d ready and %d updated Pods", Namespace, Name, d.Status.ReadyReplicas, d.Status.UpdatedReplicas), nil
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: Name}, &svc); err != nil {
		return false, "", err
	}
	return true, fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, Port), nil
}
