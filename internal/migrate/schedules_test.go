package migrate

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func legacySchedule(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(LegacyScheduleGVK)
	u.SetNamespace("ns")
	u.SetName("nightly")
	u.SetUID("legacy-uid")
	return u
}

func s3Spec() map[string]any {
	return map[string]any{
		"clusterRef": map[string]any{"name": "db"},
		"schedule":   "0 3 * * *",
		"destination": map[string]any{"s3": map[string]any{
			"endpoint": "https://s3.example", "bucket": "b", "key": "db",
			"credentialsSecretRef": map[string]any{"name": "creds"}, "region": "eu", "forcePathStyle": true,
		}},
		"successfulJobsHistoryLimit": int64(5),
		"failedJobsHistoryLimit":     int64(2),
	}
}

func TestPlanScheduleCarriesEveryField(t *testing.T) {
	p := PlanSchedule(legacySchedule(s3Spec()), func(c string) bool { return c == "db" })
	if p.Refusal != "" || p.Waiting != "" {
		t.Fatalf("refusal %q, waiting %q", p.Refusal, p.Waiting)
	}
	s := p.Schedule
	d := s.Spec.SnapshotTemplate.Spec.Destination.S3
	if s.Name != "nightly" || s.Namespace != "ns" || s.Annotations[MigratedFromAnnotation] != "legacy-uid" ||
		s.Spec.Schedule != "0 3 * * *" || s.Spec.SnapshotTemplate.Spec.ClusterRef.Name != "db" ||
		d == nil || d.Endpoint != "https://s3.example" || d.Bucket != "b" || d.Key != "db" || d.CredentialsSecretRef.Name != "creds" || d.Region != "eu" || !d.ForcePathStyle ||
		ptr.Deref(s.Spec.SuccessfulSnapshotsHistoryLimit, 0) != 5 || ptr.Deref(s.Spec.FailedSnapshotsHistoryLimit, 0) != 2 || s.Spec.Retention != nil {
		t.Errorf("schedule %+v", s)
	}
	var out bytes.Buffer
	if err := p.Render(&out); err != nil || !strings.Contains(out.String(), "kind: EtcdSnapshotSchedule") || !strings.Contains(out.String(), "no retention") {
		t.Errorf("render (%v):\n%s", err, out.String())
	}
}

func TestPlanScheduleRefusesAndWaits(t *testing.T) {
	both := s3Spec()
	both["destination"].(map[string]any)["pvc"] = map[string]any{"claimName": "c"}
	noSchedule := s3Spec()
	delete(noSchedule, "schedule")
	noCluster := s3Spec()
	delete(noCluster, "clusterRef")
	for name, spec := range map[string]map[string]any{"both destinations": both, "no schedule": noSchedule, "no cluster": noCluster} {
		if p := PlanSchedule(legacySchedule(spec), func(string) bool { return true }); p.Refusal == "" {
			t.Errorf("%s: not refused", name)
		}
	}
	if p := PlanSchedule(legacySchedule(s3Spec()), func(string) bool { return false }); p.Refusal != "" || !strings.Contains(p.Waiting, "db is not adopted") {
		t.Errorf("cluster not adopted: refusal %q, waiting %q", p.Refusal, p.Waiting)
	}
}

// Carrying creates the new schedule before the legacy one goes with its
// CronJob; a run stopped between the two finishes on the next; a schedule
// of that name that the tool did not make is never taken over.
func TestApplyScheduleIsIdempotent(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha2.AddToScheme(scheme)
	legacy := legacySchedule(s3Spec())
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly-x7k2p", Namespace: "ns", Labels: map[string]string{legacyScheduleLabel: "nightly"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(legacy.DeepCopy(), cron).Build()
	ctx := context.Background()
	p := PlanSchedule(legacy, func(string) bool { return true })
	for run := range 2 {
		if err := ApplySchedule(ctx, c, p); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	got := &v1alpha2.EtcdSnapshotSchedule{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "nightly"}, got); err != nil || got.Spec.Schedule != "0 3 * * *" {
		t.Errorf("new schedule: %v %+v", err, got.Spec)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cron), &batchv1.CronJob{}); !apierrors.IsNotFound(err) {
		t.Errorf("legacy CronJob still there: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy.DeepCopy()); !apierrors.IsNotFound(err) {
		t.Errorf("legacy schedule still there: %v", err)
	}

	other := PlanSchedule(legacySchedule(s3Spec()), func(string) bool { return true })
	other.Legacy.SetUID("another-uid")
	if err := ApplySchedule(ctx, c, other); err == nil || !strings.Contains(err.Error(), "did not make") {
		t.Errorf("a schedule the tool did not make from this one: %v", err)
	}
}

// The legacy cluster lingers, marked for deletion, while the garbage
// collector orphans its dependents: the adoption is finished all the same,
// and a schedule run in the same pass is carried.
func TestAdoptedClusterWhileTheLegacyOneGoes(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha2.AddToScheme(scheme)
	ctx := context.Background()
	adopted := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", Annotations: map[string]string{MigratedFromAnnotation: "legacy-cluster-uid"}}}
	legacy := func(uid string, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(LegacyGVR.GroupVersion().WithKind("EtcdCluster"))
		u.SetNamespace("ns")
		u.SetName("db")
		u.SetUID(types.UID(uid))
		if deleting {
			u.SetFinalizers([]string{metav1.FinalizerOrphanDependents})
			u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
		}
		return u
	}
	for _, tc := range []struct {
		name    string
		objects []client.Object
		want    bool
	}{
		{"no EtcdCluster yet", []client.Object{legacy("legacy-cluster-uid", false)}, false},
		{"legacy cluster still there", []client.Object{adopted.DeepCopy(), legacy("legacy-cluster-uid", false)}, false},
		{"legacy cluster going", []client.Object{adopted.DeepCopy(), legacy("legacy-cluster-uid", true)}, true},
		{"another legacy cluster of the name going", []client.Object{adopted.DeepCopy(), legacy("other-uid", true)}, false},
		{"legacy cluster gone", []client.Object{adopted.DeepCopy()}, true},
	} {
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objects...).Build()
		if got := adoptedCluster(ctx, c, "ns", "db"); got != tc.want {
			t.Errorf("%s: adopted %v, want %v", tc.name, got, tc.want)
		}
	}
}
