package migrate

import (
	"bytes"
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// The Deployments the operator check is pointed at in these tests, as the
// runbook names them.
const (
	testLegacyRef   = "etcd-operator-system/etcd-operator-controller-manager"
	testOperatorRef = "etcd-operator-system/etcd-operator"
)

// operatorDeployment is a Deployment of replicas running image; ref is its
// namespace/name.
func operatorDeployment(ref, image string, replicas int32) *appsv1.Deployment {
	ns, name, _ := strings.Cut(ref, "/")
	labels := map[string]string{"control-plane": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: image}}},
			},
		},
		Status: appsv1.DeploymentStatus{Replicas: replicas, ReadyReplicas: replicas},
	}
}

// operatorPod is a running Pod of the Deployment d.
func operatorPod(d *appsv1.Deployment) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-7d9f8-abcde", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// The Deployments of a migration whose check should pass: both operators
// installed under the names the runbook gives and scaled to zero.
func stoppedOperators() []client.Object {
	return []client.Object{
		operatorDeployment(testLegacyRef, "ghcr.io/aenix-io/etcd-operator:v0.4.2", 0),
		operatorDeployment(testOperatorRef, "ghcr.io/seed74754924/etcd-operator:v0.1.0", 0),
	}
}

// applyWith runs the --apply half of etcd-migrate on the given objects,
// with an adopted cluster db in namespace ns and a legacy schedule of it to
// carry: the first thing apply changes once its checks pass. The webhooks
// are looked for as Run does.
func applyWith(t *testing.T, o Options, objs ...client.Object) (code int, out, errOut string, c client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha2.AddToScheme(scheme)
	adopted := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", Annotations: map[string]string{MigratedFromAnnotation: "legacy-cluster-uid"}}}
	legacy := legacySchedule(s3Spec())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{corev1.LabelMetadataName: "ns"}}}
	c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, ns, adopted, legacy.DeepCopy())...).Build()
	carry := []*SchedulePlan{PlanSchedule(legacy, func(string) bool { return true })}
	webhooks, err := legacyWebhooks(context.Background(), c, migration{carry: carry}.namespaces())
	if err != nil {
		t.Fatal(err)
	}
	if o.LegacyOperator == "" {
		o.LegacyOperator = testLegacyRef
	}
	if o.Operator == "" {
		o.Operator = testOperatorRef
	}
	o.Apply, o.Yes = true, true
	var stdout, stderr bytes.Buffer
	code = apply(context.Background(), Env{Client: c}, o, migration{carry: carry, webhooks: webhooks}, 0, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String(), c
}

// checkNothingChanged checks that a refused apply left the legacy schedule
// where it was and made no EtcdSnapshotSchedule.
func checkNothingChanged(t *testing.T, c client.Client, out string) {
	t.Helper()
	ctx := context.Background()
	legacy := legacySchedule(nil)
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
		t.Errorf("the legacy schedule after a refused apply: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "nightly"}, &v1alpha2.EtcdSnapshotSchedule{}); err == nil {
		t.Error("a refused apply carried the schedule")
	}
	if strings.Contains(out, "Done:") || strings.Contains(out, "Carried") {
		t.Errorf("a refused apply went on:\n%s", out)
	}
}

// TestApplyRefusesAMissingOperatorDeployment: a name that does not exist
// used to pass the check, so a wrong --legacy-operator let a running legacy
// operator through. Either Deployment missing stops the tool.
func TestApplyRefusesAMissingOperatorDeployment(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want []string
	}{{
		name: "the legacy operator's Deployment",
		o:    Options{LegacyOperator: "etcd-operator-system/etcd-controller-manager"},
		want: []string{"etcd-operator-system/etcd-controller-manager", "not found", "--legacy-operator", "<fullname>-controller-manager"},
	}, {
		name: "this operator's Deployment",
		o:    Options{Operator: "etcd-operator-system/eo"},
		want: []string{"etcd-operator-system/eo", "not found", "--operator"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut, c := applyWith(t, tc.o, stoppedOperators()...)
			if code != ExitFailed {
				t.Errorf("exit %d, want %d\n%s%s", code, ExitFailed, out, errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("the refusal does not say %q: %s", want, errOut)
				}
			}
			checkNothingChanged(t, c, out)
		})
	}
}

// TestApplyRefusesARunningLegacyOperator: whatever the flags name, a
// Deployment anywhere that runs the legacy operator's image and is not
// stopped refuses the run.
func TestApplyRefusesARunningLegacyOperator(t *testing.T) {
	running := operatorDeployment("cozy-etcd-operator/etcd-operator", "ghcr.io/aenix-io/etcd-operator:v0.4.2", 1)
	scaledButLingering := operatorDeployment("platform/legacy-etcd", "registry.example.com/mirror/cozystack/etcd-operator:v0.4.5@sha256:0123", 0)
	for _, tc := range []struct {
		name string
		objs []client.Object
		want []string
	}{{
		name: "a legacy Deployment with replicas",
		objs: []client.Object{running},
		want: []string{"cozy-etcd-operator/etcd-operator", "ghcr.io/aenix-io/etcd-operator:v0.4.2", "kubectl -n cozy-etcd-operator scale deployment etcd-operator --replicas=0"},
	}, {
		name: "a mirrored legacy image scaled to zero with its Pod still up",
		objs: []client.Object{scaledButLingering, operatorPod(scaledButLingering)},
		want: []string{"platform/legacy-etcd", "still exists"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut, c := applyWith(t, Options{}, append(stoppedOperators(), tc.objs...)...)
			if code != ExitFailed {
				t.Errorf("exit %d, want %d\n%s%s", code, ExitFailed, out, errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("the refusal does not say %q: %s", want, errOut)
				}
			}
			checkNothingChanged(t, c, out)
		})
	}
}

// TestApplyGoesOnWithEveryOperatorStopped: both named Deployments at zero,
// and another legacy one at zero with no Pod left, let the run go on; so
// does this operator's image running elsewhere (another release, watching
// other namespaces, is none of the legacy operator's business).
func TestApplyGoesOnWithEveryOperatorStopped(t *testing.T) {
	objs := append(stoppedOperators(),
		operatorDeployment("platform/legacy-etcd", "ghcr.io/cozystack/etcd-operator:v0.4.5", 0),
		operatorDeployment("team-b/etcd-operator", "ghcr.io/seed74754924/etcd-operator:v0.1.0", 1),
		operatorDeployment("monitoring/etcd-exporter", "quay.io/example/etcd-operator-exporter:v1", 1),
	)
	code, out, errOut, c := applyWith(t, Options{}, objs...)
	if code != ExitOK {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitOK, out, errOut)
	}
	if !strings.Contains(out, "Carried schedule ns/nightly") {
		t.Errorf("the schedule was not carried:\n%s", out)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nightly"}, &v1alpha2.EtcdSnapshotSchedule{}); err != nil {
		t.Errorf("the carried schedule: %v", err)
	}
}

// TestApplySkipsTheOperatorCheckWhenAsked: --skip-operator-check is the way
// out for operators not run as a Deployment.
func TestApplySkipsTheOperatorCheckWhenAsked(t *testing.T) {
	code, out, errOut, _ := applyWith(t, Options{SkipOperatorCheck: true, LegacyOperator: "nowhere/none"})
	if code != ExitOK {
		t.Errorf("exit %d with --skip-operator-check, want %d\n%s%s", code, ExitOK, out, errOut)
	}
}

func TestLegacyOperatorImage(t *testing.T) {
	for image, want := range map[string]bool{
		"ghcr.io/aenix-io/etcd-operator:v0.4.2":                     true,
		"ghcr.io/aenix-io/etcd-operator":                            true,
		"ghcr.io/cozystack/etcd-operator:v0.4.5":                    true,
		"ghcr.io/cozystack/etcd-operator@sha256:0123":               true,
		"registry.example.com:5000/cache/aenix-io/etcd-operator:v1": true,
		"aenix-io/etcd-operator:latest":                             true,
		"ghcr.io/seed74754924/etcd-operator:v0.1.0":                 false,
		"quay.io/coreos/etcd:v3.5.12":                               false,
		"ghcr.io/aenix-io/etcd-operator-docs:v1":                    false,
		"ghcr.io/not-aenix-io/etcd-operator:v1":                     false,
		"registry.example.com:5000/etcd-operator":                   false,
	} {
		if got := legacyOperatorImage(image); got != want {
			t.Errorf("legacyOperatorImage(%q) = %v, want %v", image, got, want)
		}
	}
}
