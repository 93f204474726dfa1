package api

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// podMarkCase updates, as user, a Pod that carries the mark before (none
// when empty, else put there by the operator) with change.
type podMarkCase struct {
	name     string
	user     string
	before   string
	change   func(*corev1.Pod)
	admitted bool
}

var podMarkCases = []podMarkCase{
	{name: "a cluster admin marks a member's Pod", user: "jane", change: setPodMark("true")},
	{name: "a cluster admin removes a Pod's mark", user: "jane", before: "true", change: removePodMark, admitted: true},
	{name: "a label on a Pod", user: "jane", change: func(p *corev1.Pod) { metav1.SetMetaDataLabel(&p.ObjectMeta, "team", "db") }, admitted: true},
	{name: "the operator marks a Pod", user: guardOperator, change: setPodMark("true"), admitted: true},
}

func setPodMark(value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, manifest.AnnotationForceNewCluster, value)
	}
}

func removePodMark(p *corev1.Pod) { delete(p.Annotations, manifest.AnnotationForceNewCluster) }

// TestSurvivorMarkGuardOnPods: the mark on a Pod, which etcd reads at every
// start of its container, is guarded as the member's is.
func TestSurvivorMarkGuardOnPods(t *testing.T) {
	ns := namespace(t)
	installPolicy(t, markGuardPolicy, map[string]any{"manager": map[string]any{"watchNamespaces": []any{ns}}})
	waitMarkGuarding(t, ns)
	// The API server admits no Pod of a ServiceAccount that does not
	// exist, and no controller makes "default" here.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}
	if err := k.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, tc := range podMarkCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, ns) })
	}
	t.Run("a cluster admin creates a marked Pod", func(t *testing.T) {
		p := podWithMark(ns, "true")
		if err := as(t, "jane").Create(context.Background(), p); err == nil {
			t.Fatalf("creating Pod %s with the mark was admitted, want it refused", p.Name)
		} else {
			checkMarkMessageOf(t, err, "Pod marked-")
		}
	})
}

func (tc podMarkCase) run(t *testing.T, ns string) {
	t.Helper()
	p := podWithMark(ns, tc.before)
	if err := as(t, guardOperator).Create(context.Background(), p); err != nil {
		t.Fatalf("creating a Pod as the operator: %v", err)
	}
	changed := p.DeepCopy()
	tc.change(changed)
	err := as(t, tc.user).Update(context.Background(), changed)
	stored := &corev1.Pod{}
	if gerr := k.Get(context.Background(), client.ObjectKeyFromObject(p), stored); gerr != nil {
		t.Fatal(gerr)
	}
	got, marked := stored.Annotations[manifest.AnnotationForceNewCluster]
	want, wantMarked := changed.Annotations[manifest.AnnotationForceNewCluster]
	switch {
	case tc.admitted && err != nil:
		t.Fatalf("updating Pod %s: %v, want it admitted", p.Name, err)
	case tc.admitted && (marked != wantMarked || got != want):
		t.Errorf("Pod %s has mark %q (%v) after an admitted update, want %q (%v)", p.Name, got, marked, want, wantMarked)
	case !tc.admitted && err == nil:
		t.Fatalf("updating Pod %s was admitted, want it refused", p.Name)
	case !tc.admitted:
		checkMarkMessageOf(t, err, "Pod "+p.Name)
		if before := p.Annotations[manifest.AnnotationForceNewCluster]; got != before {
			t.Errorf("Pod %s has mark %q after a refused update, want %q", p.Name, got, before)
		}
	}
}

// podWithMark is a Pod that runs nowhere, with the mark value (none when
// empty); its name is generated.
func podWithMark(ns, value string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "marked-", Labels: map[string]string{manifest.LabelCluster: "c"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd:test"}}},
	}
	if value != "" {
		p.Annotations = map[string]string{manifest.AnnotationForceNewCluster: value}
	}
	return p
}
