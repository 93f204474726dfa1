package api

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestClusterDefaults(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, cluster, ns, "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}}}}")
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha2.EtcdCluster
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", got.Spec.Replicas)
	}
	if want := resource.MustParse("1Gi"); got.Spec.Storage.Size.Cmp(want) != 0 {
		t.Errorf("storage.size = %s, want 1Gi", got.Spec.Storage.Size.String())
	}
	if got.Spec.Storage.Medium != v1alpha2.StorageMediumDefault {
		t.Errorf("storage.medium = %q, want empty", got.Spec.Storage.Medium)
	}
	if got.Spec.ProgressDeadlineSeconds == nil || *got.Spec.ProgressDeadlineSeconds != 600 {
		t.Errorf("progressDeadlineSeconds = %v, want 600", got.Spec.ProgressDeadlineSeconds)
	}
	if kind := got.Spec.TLS.Client.CertManager.ServerIssuerRef.Kind; kind != "Issuer" {
		t.Errorf("issuer kind = %q, want Issuer", kind)
	}
}

func TestStorageDefaultsKeepGivenFields(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, cluster, ns, "version: 3.6.16\nstorage: {medium: Memory}")
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha2.EtcdCluster
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Storage.Medium != v1alpha2.StorageMediumMemory || got.Spec.Storage.Size.String() != "1Gi" {
		t.Errorf("storage = %+v, want Memory of 1Gi", got.Spec.Storage)
	}
}

func TestMemberDefaults(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, member, ns, memberMin)
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha2.EtcdMember
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas != 1 {
		t.Errorf("replicas = %d, want 1", got.Spec.Replicas)
	}
}

// TestStatusIsASubresource checks that a write to the main resource cannot
// change status, and a write to /status can.
func TestStatusIsASubresource(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	cases := []struct{ kind, spec, field, value string }{
		{cluster, minimal, "clusterID", "00000000000000aa"},
		{member, memberMin, "memberID", "00000000000000bb"},
		{snapshot, snapPVC, "phase", "Complete"},
		{defrag, "clusterRef: {name: c}", "phase", "Complete"},
		{policy, policyMin, "lastScheduleTime", "2026-12-01T03:00:00Z"},
	}
	for _, tc := range cases {
		obj := object(t, tc.kind, ns, tc.spec)
		if err := k.Create(ctx, obj); err != nil {
			t.Fatalf("%s: %v", tc.kind, err)
		}
		if err := unstructured.SetNestedField(obj.Object, tc.value, "status", tc.field); err != nil {
			t.Fatal(err)
		}
		if err := k.Update(ctx, obj); err != nil {
			t.Fatalf("%s: update: %v", tc.kind, err)
		}
		if _, found, _ := unstructured.NestedString(obj.Object, "status", tc.field); found {
			t.Errorf("%s: a write to the main resource changed status.%s", tc.kind, tc.field)
		}
		if err := unstructured.SetNestedField(obj.Object, tc.value, "status", tc.field); err != nil {
			t.Fatal(err)
		}
		if err := k.Status().Update(ctx, obj); err != nil {
			t.Fatalf("%s: writing /status: %v", tc.kind, err)
		}
		if got, _, _ := unstructured.NestedString(obj.Object, "status", tc.field); got != tc.value {
			t.Errorf("%s: status.%s = %q after writing /status, want %q", tc.kind, tc.field, got, tc.value)
		}
	}
}

func TestScheduleDefaults(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, schedule, ns, schedMin)
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha2.EtcdSnapshotSchedule
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.SuccessfulSnapshotsHistoryLimit == nil || *got.Spec.SuccessfulSnapshotsHistoryLimit != 3 ||
		got.Spec.FailedSnapshotsHistoryLimit == nil || *got.Spec.FailedSnapshotsHistoryLimit != 1 {
		t.Errorf("history limits = %v/%v, want 3/1", got.Spec.SuccessfulSnapshotsHistoryLimit, got.Spec.FailedSnapshotsHistoryLimit)
	}
	if got.Spec.Suspend || got.Spec.TimeZone != nil || got.Spec.Retention != nil {
		t.Errorf("spec = %+v: nothing else is defaulted", got.Spec)
	}
}

// TestDefragPolicyDefaults: as in the reference, nothing is written into a
// policy's spec; an unset concurrencyPolicy means Forbid to the controller.
func TestDefragPolicyDefaults(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, policy, ns, policyMin)
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha2.EtcdDefragPolicy
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	if s.ConcurrencyPolicy != "" || s.Suspend != nil || s.StartingDeadlineSeconds != nil || s.HistoryLimit != nil ||
		s.Rule != nil || s.TTLSecondsAfterFinished != nil || s.TimeZone != nil {
		t.Errorf("spec = %+v: nothing is defaulted", s)
	}
}
