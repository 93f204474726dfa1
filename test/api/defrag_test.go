package api

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	defragcontroller "github.com/seed74754924/etcd-operator/internal/controller/defrag"
)

// The defrag controller in a manager against the real API server: its
// watches start, its status writes go through the status subresource, and
// its verdicts that need no etcd (a missing cluster, a cluster not formed, a
// queue, a TTL of 0) land in the objects. The harness in
// test/lifecycle covers everything with etcd.
func TestDefragControllerAgainstTheAPIServer(t *testing.T) {
	ns := namespace(t)
	startDefragController(t, ns)
	ctx := context.Background()
	create := func(name, cluster string, ttl *int32) {
		t.Helper()
		d := &v1alpha2.EtcdDefrag{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha2.EtcdDefragSpec{ClusterRef: corev1.LocalObjectReference{Name: cluster}, TTLSecondsAfterFinished: ttl}}
		if err := k.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	condition := func(name, reason string, phase v1alpha2.DefragPhase) func() error {
		return func() error {
			d := &v1alpha2.EtcdDefrag{}
			if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
				return err
			}
			c := conditions.Get(d.Status.Conditions, conditions.DefragChecked)
			if c == nil || c.Reason != reason || d.Status.Phase != phase {
				return fmt.Errorf("%s is %s with %+v", name, d.Status.Phase, c)
			}
			return nil
		}
	}

	create("lost", "nope", nil)
	eventually(t, "a run for a missing cluster fails", condition("lost", conditions.ReasonClusterNotFound, v1alpha2.DefragFailed))

	create("gone", "nope", ptr.To[int32](0))
	eventually(t, "a finished run with a TTL of 0 is deleted", func() error {
		err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &v1alpha2.EtcdDefrag{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return errors.New("still there")
	})

	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}}
	c.Spec.Version = "3.6.16"
	c.Spec.Replicas = ptr.To[int32](3)
	c.Spec.Storage = v1alpha2.StorageSpec{Size: resource.MustParse("1Gi")}
	if err := k.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	create("first", "c", nil)
	eventually(t, "a run waits for a cluster that has not formed", condition("first", conditions.ReasonClusterBusy, v1alpha2.DefragPending))
	// Created in the same second, the names break the tie: first goes first.
	create("second", "c", nil)
	eventually(t, "a second run for the cluster is queued", condition("second", conditions.ReasonQueued, v1alpha2.DefragPending))
}

func startDefragController(t *testing.T, ns string) {
	t.Helper()
	mgr, ctx, cancel := newManager(t, ns)
	dr := &defragcontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: &eventLog{}, Dial: noEtcd}
	if err := dr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(ctx, t, mgr, cancel)
}

// runManager starts the manager until the test ends; the test fails if it
// stops with an error.
func runManager(ctx context.Context, t *testing.T, mgr ctrl.Manager, cancel context.CancelFunc) {
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("the manager stopped with: %v", err)
		}
	})
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not within 30s: %v", what, last)
	}
}
