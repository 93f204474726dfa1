package api

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/controller/defragpolicy"
)

// reconcilePolicy creates a policy and runs one pass of its controller
// against the real API server, a minute and a half after the policy was
// created (so that one tick of "* * * * *" is due).
func reconcilePolicy(t *testing.T, ns string, p *v1alpha2.EtcdDefragPolicy) *v1alpha2.EtcdDefragPolicy {
	t.Helper()
	ctx := context.Background()
	p.Namespace = ns
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	r := &defragpolicy.Reconciler{Client: k, Recorder: events.NewFakeRecorder(10),
		Clock: clocktesting.NewFakeClock(p.CreationTimestamp.Add(90 * time.Second))}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got := &v1alpha2.EtcdDefragPolicy{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func runsIn(t *testing.T, ns string) []v1alpha2.EtcdDefrag {
	t.Helper()
	list := &v1alpha2.EtcdDefragList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestDefragPolicyRunPassesAdmission: the run a policy makes (its rule with
// an integer quantity, TTL, labels, owner) is accepted by the EtcdDefrag
// CRD's schema and CEL rules, and the policy's status write is accepted by
// its own.
func TestDefragPolicyRunPassesAdmission(t *testing.T) {
	ns := namespace(t)
	got := reconcilePolicy(t, ns, &v1alpha2.EtcdDefragPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec: v1alpha2.EtcdDefragPolicySpec{
			ClusterRef: corev1.LocalObjectReference{Name: "db"}, Schedule: "* * * * *",
			Rule: &v1alpha2.DefragRule{FreeSpaceAbove: ptr.To(resource.MustParse("209715200")),
				QuotaUsageAbove: "80%", MinReclaim: ptr.To(resource.MustParse("32Mi"))},
			TTLSecondsAfterFinished: ptr.To[int32](3600), HistoryLimit: ptr.To[int32](3),
		},
	})
	runs := runsIn(t, ns)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	d := runs[0]
	if ref := metav1.GetControllerOf(&d); ref == nil || ref.UID != got.UID || !strings.HasPrefix(d.Name, "nightly-") ||
		d.Spec.Rule == nil || d.Spec.Rule.QuotaUsageAbove != "80%" {
		t.Errorf("run %s: %+v %+v", d.Name, d.OwnerReferences, d.Spec)
	}
	st := got.Status
	if c := conditions.Get(st.Conditions, conditions.Active); c == nil || c.Status != metav1.ConditionTrue ||
		st.LastScheduleTime == nil || len(st.Active) != 1 || st.Active[0].Name != d.Name {
		t.Errorf("policy status %+v", st)
	}
}

// TestDefragPolicyRejectedRun: a policy whose name, or cluster name, is
// too long for the labels its runs carry passes admission, but its runs
// could not; the policy says so in its condition and the pass ends without
// an error (no retry loop).
func TestDefragPolicyRejectedRun(t *testing.T) {
	long := strings.Repeat("p", 64)
	for _, tc := range []struct {
		name, policy, cluster, message string
	}{
		{"policy name", long, "db", "recreate the policy under a name of at most 63 characters"},
		{"cluster name", "nightly", long, "The API server refused run nightly-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			got := reconcilePolicy(t, ns, &v1alpha2.EtcdDefragPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: tc.policy},
				Spec:       v1alpha2.EtcdDefragPolicySpec{ClusterRef: corev1.LocalObjectReference{Name: tc.cluster}, Schedule: "* * * * *"},
			})
			if n := len(runsIn(t, ns)); n != 0 {
				t.Errorf("%d runs, want none", n)
			}
			c := conditions.Get(got.Status.Conditions, conditions.Active)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonRunRejected || !strings.Contains(c.Message, tc.message) {
				t.Errorf("Active %+v, want RunRejected with %q", c, tc.message)
			}
		})
	}
}
