package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The legacy etcd.aenix.io/v1alpha1 operator, played by the test: its CRD
// from a fixture, and for each cluster the objects that operator makes
// (StatefulSet, headless and client Services, cluster-state ConfigMap,
// PodDisruptionBudget) with its names, labels, owner references, flags and
// data layout, so that the migration tool meets what it meets in the field.

// legacyImage is the etcd the legacy clusters run: a 3.5 release, as the
// legacy operator's default (v3.5.12) was.
const legacyImage = "quay.io/coreos/etcd:v3.5.35"

// legacyClaimSize is the claim size the legacy clusters ask for.
var legacyClaimSize = resource.MustParse("1Gi")

var legacyCRDOnce sync.Once

// installLegacyCRD installs the legacy CRDs once for every suite that needs it.
func installLegacyCRD(t *testing.T) {
	t.Helper()
	path := filepath.Join(tools.RepoRoot(), "test", "e2e", "testdata", "legacy-crds.yaml")
	legacyCRDOnce.Do(func() {
		if out, err := kubectl("apply", "-f", path); err != nil && !strings.Contains(out, "AlreadyExists") {
			t.Fatalf("installing the legacy CRD: %v\n%s", err, out)
		}
	})
	eventually(t, time.Minute, "the legacy CRDs served", func() (bool, string) {
		out, err := kubectl("get", "etcdclusters.etcd.aenix.io,etcdbackupschedules.etcd.aenix.io,etcdbackups.etcd.aenix.io", "-A")
		return err == nil, out
	})
}

func legacyLabels(name string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "etcd",
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/managed-by": "etcd-operator",
	}
}

// legacyCR creates the legacy EtcdCluster: three members, a claim template,
// a pod template with a label and the etcd image, an extra etcd option and
// a PodDisruptionBudget template.
func legacyCR(t *testing.T, ns, name string, replicas int32, mods ...func(spec map[string]any)) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{
		"replicas": int64(replicas),
		"options":  map[string]any{"log-level": "info"},
		"podTemplate": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"team": "storage"}},
			"spec": map[string]any{"containers": []any{map[string]any{
				"name": "etcd", "image": legacyImage,
			}}},
		},
		"storage": map[string]any{"volumeClaimTemplate": map[string]any{
			"spec": map[string]any{
				"accessModes": []any{"ReadWriteOnce"},
				"resources":   map[string]any{"requests": map[string]any{"storage": legacyClaimSize.String()}},
			},
		}},
		"podDisruptionBudgetTemplate": map[string]any{},
	}
	for _, m := range mods {
		m(spec)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "etcd.aenix.io/v1alpha1", "kind": "EtcdCluster",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
	if err := k.Create(context.Background(), u); err != nil {
		t.Fatalf("creating legacy EtcdCluster %s: %v", name, err)
	}
	return u
}

// legacyObjects makes what the legacy operator makes for a cluster whose
// members keep their data in claims.
func legacyObjects(name, ns string, replicas int32, owner *unstructured.Unstructured, emptyDir bool) []client.Object {
	headless := name + "-headless"
	ref := metav1.OwnerReference{APIVersion: "etcd.aenix.io/v1alpha1", Kind: "EtcdCluster", Name: name, UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	meta := func(n string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: n, Namespace: ns, Labels: legacyLabels(name), OwnerReferences: []metav1.OwnerReference{ref}}
	}
	var peers string
	for i := int32(0); i < replicas; i++ {
		if i > 0 {
			peers += ","
		}
		peers += fmt.Sprintf("%s-%d=https://%s-%d.%s.%s.svc:2380", name, i, name, i, headless, ns)
	}
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: meta(name + "-cluster-state"), Data: map[string]string{
			"ETCD_INITIAL_CLUSTER_STATE": "new",
			"ETCD_INITIAL_CLUSTER":       peers,
			"ETCD_INITIAL_CLUSTER_TOKEN": name + "-" + ns,
		}},
		&corev1.Service{ObjectMeta: meta(headless), Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Selector: legacyLabels(name),
			Ports: []corev1.ServicePort{{Name: "peer", Port: 2380}, {Name: "client", Port: 2379}},
		}},
		&corev1.Service{ObjectMeta: meta(name), Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, Selector: legacyLabels(name),
			Ports: []corev1.ServicePort{{Name: "client", Port: 2379}, {Name: "metrics", Port: 2381}},
		}},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta(name), Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               ptr.To(intstr.FromInt32(replicas/2 + 1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: legacyLabels(name)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.IfHealthyBudget),
		}},
		legacyStatefulSet(meta(name), headless, replicas, emptyDir, legacyTLSOf(owner)),
	}
}

// legacyTLSOf reads the Secret names of spec.security.tls of a legacy CR.
func legacyTLSOf(cr *unstructured.Unstructured) map[string]string {
	m, _, _ := unstructured.NestedStringMap(cr.Object, "spec", "security", "tls")
	return m
}

// legacyArgs are the flags the legacy operator (v0.3.0 and later) renders,
// with the quota it derives from the claim size and the spec's option, and
// the TLS flags of its spec.security.tls.
func legacyArgs(headless string, tls map[string]string) []string {
	quota := legacyClaimSize.Value() * 95 / 100
	proto := "http://"
	if tls["serverSecret"] != "" {
		proto = "https://"
	}
	args := []string{
		"--name=$(POD_NAME)",
		"--listen-metrics-urls=http://0.0.0.0:2381",
		"--listen-peer-urls=https://0.0.0.0:2380",
		"--listen-client-urls=" + proto + "0.0.0.0:2379",
		"--initial-advertise-peer-urls=https://$(POD_NAME)." + headless + ".$(POD_NAMESPACE).svc:2380",
		"--data-dir=/var/run/etcd/default.etcd",
		"--advertise-client-urls=" + proto + "$(POD_NAME)." + headless + ".$(POD_NAMESPACE).svc:2379",
	}
	if tls["peerSecret"] != "" {
		args = append(args, "--peer-trusted-ca-file=/etc/etcd/pki/peer/ca/ca.crt", "--peer-cert-file=/etc/etcd/pki/peer/cert/tls.crt",
			"--peer-key-file=/etc/etcd/pki/peer/cert/tls.key", "--peer-client-cert-auth")
	} else {
		args = append(args, "--peer-auto-tls")
	}
	if tls["serverSecret"] != "" {
		args = append(args, "--cert-file=/etc/etcd/pki/server/cert/tls.crt", "--key-file=/etc/etcd/pki/server/cert/tls.key")
	}
	if tls["clientSecret"] != "" {
		args = append(args, "--trusted-ca-file=/etc/etcd/pki/client/ca/ca.crt", "--client-cert-auth")
	}
	return append(args,
		"--auto-compaction-retention=5m",
		"--snapshot-count=10000",
		fmt.Sprintf("--quota-backend-bytes=%d", quota),
		"--log-level=info",
	)
}

// legacyTLSVolumes are the Secret volumes (and their mounts) the legacy
// operator adds for spec.security.tls.
func legacyTLSVolumes(tls map[string]string) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range []struct{ field, volume, path string }{
		{"peerTrustedCASecret", "peer-trusted-ca-certificate", "/etc/etcd/pki/peer/ca"},
		{"peerSecret", "peer-certificate", "/etc/etcd/pki/peer/cert"},
		{"serverSecret", "server-certificate", "/etc/etcd/pki/server/cert"},
		{"clientTrustedCASecret", "client-trusted-ca-certificate", "/etc/etcd/pki/client/ca"},
	} {
		if tls[v.field] == "" {
			continue
		}
		vols = append(vols, corev1.Volume{Name: v.volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: tls[v.field]}}})
		mounts = append(mounts, corev1.VolumeMount{Name: v.volume, MountPath: v.path, ReadOnly: true})
	}
	return vols, mounts
}

func legacyStatefulSet(meta metav1.ObjectMeta, headless string, replicas int32, emptyDir bool, tls map[string]string) *appsv1.StatefulSet {
	name := meta.Name
	podLabels := legacyLabels(name)
	podLabels["team"] = "storage"
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 5, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(2381)}}}
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: meta,
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         headless,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: legacyLabels(name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:    "etcd",
						Image:   legacyImage,
						Command: []string{"etcd"},
						Args:    legacyArgs(headless, tls),
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
						},
						EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: name + "-cluster-state"},
						}}},
						Ports:          []corev1.ContainerPort{{Name: "peer", ContainerPort: 2380}, {Name: "client", ContainerPort: 2379}},
						StartupProbe:   probe("/readyz?serializable=false"),
						ReadinessProbe: probe("/readyz"),
						LivenessProbe:  probe("/livez"),
						VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/var/run/etcd"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: legacyClaimSize}},
				},
			}},
		},
	}
	if emptyDir {
		sts.Spec.VolumeClaimTemplates = nil
		sts.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	vols, mounts := legacyTLSVolumes(tls)
	sts.Spec.Template.Spec.Volumes = append(sts.Spec.Template.Spec.Volumes, vols...)
	c := &sts.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, mounts...)
	return sts
}

// startLegacyCluster creates a legacy cluster of n members and waits until
// its StatefulSet is ready; then, as the legacy operator does, it switches
// the cluster state to existing.
func startLegacyCluster(t *testing.T, ns, name string, n int32, mods ...func(spec map[string]any)) *unstructured.Unstructured {
	t.Helper()
	cr := legacyCR(t, ns, name, n, mods...)
	_, emptyDir, _ := unstructured.NestedMap(cr.Object, "spec", "storage", "emptyDir")
	for _, obj := range legacyObjects(name, ns, n, cr, emptyDir) {
		if err := k.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	eventually(t, 4*time.Minute, "legacy StatefulSet "+name+" ready", func() (bool, string) {
		sts := &appsv1.StatefulSet{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sts); err != nil {
			return false, err.Error()
		}
		return sts.Status.ReadyReplicas == n, fmt.Sprintf("%d of %d ready", sts.Status.ReadyReplicas, n)
	})
	cm := &corev1.ConfigMap{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-cluster-state"}, cm); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["ETCD_INITIAL_CLUSTER_STATE"] = "existing"
	if err := k.Patch(context.Background(), cm, patch); err != nil {
		t.Fatal(err)
	}
	return cr
}
