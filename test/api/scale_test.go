package api

import (
	"context"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestClusterScaleSubresource(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, cluster, ns, "version: 3.6.16\nreplicas: 3")
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"readyMembers":2,"selector":"etcd-operator.cozystack.io/cluster=x"}}`)
	if err := k.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	typed := &v1alpha2.EtcdCluster{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), typed); err != nil {
		t.Fatal(err)
	}

	scale := &autoscalingv1.Scale{}
	if err := k.SubResource("scale").Get(ctx, typed, scale); err != nil {
		t.Fatalf("reading /scale: %v", err)
	}
	if scale.Spec.Replicas != 3 || scale.Status.Replicas != 2 || scale.Status.Selector != "etcd-operator.cozystack.io/cluster=x" {
		t.Errorf("scale = %+v / %+v, want spec 3, status 2 with the selector", scale.Spec, scale.Status)
	}

	scale.Spec.Replicas = 5
	if err := k.SubResource("scale").Update(ctx, typed, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("writing /scale: %v", err)
	}
	var got v1alpha2.EtcdCluster
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 5 {
		t.Errorf("spec.replicas = %d after scaling to 5", *got.Spec.Replicas)
	}

	scale.Spec.Replicas = -1
	err := k.SubResource("scale").Update(ctx, typed, client.WithSubResourceBody(scale))
	if err == nil || !strings.Contains(err.Error(), "greater than or equal to 0") {
		t.Errorf("scaling to -1: got %v, want a rejection", err)
	}
}

func TestMemberScaleSubresource(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, member, ns, memberMin)
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"replicas":1,"selector":"app.kubernetes.io/component=m"}}`)
	if err := k.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	typed := &v1alpha2.EtcdMember{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(obj), typed); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{}
	if err := k.SubResource("scale").Get(ctx, typed, scale); err != nil {
		t.Fatalf("reading /scale: %v", err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Replicas != 1 || scale.Status.Selector != "app.kubernetes.io/component=m" {
		t.Errorf("scale = %+v / %+v, want 1/1 with the selector", scale.Spec, scale.Status)
	}
	scale.Spec.Replicas = 2
	err := k.SubResource("scale").Update(ctx, typed, client.WithSubResourceBody(scale))
	if err == nil || !strings.Contains(err.Error(), "less than or equal to 1") {
		t.Errorf("scaling a member to 2: got %v, want a rejection", err)
	}
}
