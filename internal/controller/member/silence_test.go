package member

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	etcdfake "github.com/seed74754924/etcd-operator/test/infra/etcd/fake"
)

// timeoutRecorder records the bound each Status call was given.
type timeoutRecorder struct {
	etcd.Client
	bounds *[]time.Duration
}

func (t timeoutRecorder) Status(ctx context.Context, endpoint string) (*etcd.Status, error) {
	if d, ok := ctx.Deadline(); ok {
		*t.bounds = append(*t.bounds, time.Until(d).Round(time.Second))
	}
	return t.Client.Status(ctx, endpoint)
}

// A member whose Pod is Ready but whose etcd does not answer holds a worker
// for its status call's timeout each time it is asked; asked every 2 s, a
// hundred of them would keep every worker busy while healthy members wait.
// One that answered before is asked again after as long as it has been
// silent (2, 2, 4, 8, 16 s, then every 30 s) with the shorter bound after
// its first silence (silentTimeout); one that answers again is back at the usual pace, and
// its next silence starts from the beginning. A Pod whose etcd never
// answered (a member starting) is asked every second for its first 20 s.
func TestSilentMemberIsAskedLessAndLess(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha2.AddToScheme(scheme)
	_ = clientgoscheme.AddToScheme(scheme)
	m := testMember(func(m *v1alpha2.EtcdMember) {
		m.Status.IsVoter, m.Status.Version, m.Status.PodUID = true, "3.6.16", "pod-1"
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: "pod-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	fakeEtcd := etcdfake.New(0xc1, clock.RealClock{})
	fakeEtcd.Bootstrap(m.Name, manifest.PeerURL(m), manifest.ClientURL(m))
	m.Status.MemberID = etcd.FormatID(fakeEtcd.Members()[0].ID)
	var bounds []time.Duration
	dial := func(ctx context.Context, cfg etcd.Config) (etcd.Client, error) {
		c, err := fakeEtcd.Dialer()(ctx, cfg)
		return timeoutRecorder{Client: c, bounds: &bounds}, err
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m.DeepCopy(), pod.DeepCopy()).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Dial: dial, Recorder: discard{}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// pass runs one observation at now and moves now to its requeue.
	pass := func(p *corev1.Pod) time.Duration {
		t.Helper()
		s := testState(m, etcd.FormatID(fakeEtcd.ClusterID()), p)
		s.now = now
		res, err := r.observe(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		m = s.member
		now = now.Add(res.RequeueAfter)
		return res.RequeueAfter
	}
	healthy := pass(pod)
	fakeEtcd.CutClients(manifest.PeerURL(m), true)
	var waits []time.Duration
	for range 8 {
		waits = append(waits, pass(pod))
	}
	want := []time.Duration{2 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("a silent member was asked again after %v, want %v", waits, want)
	}
	if want := []time.Duration{statusTimeout, statusTimeout, silentTimeout}; len(bounds) < 3 || !slices.Equal(bounds[:3], want) {
		t.Errorf("the status calls were bounded by %v, want %v then %v on", bounds, want[:2], silentTimeout)
	}
	fakeEtcd.CutClients(manifest.PeerURL(m), false)
	if got := pass(pod); got != healthy {
		t.Errorf("a member that answers again is asked after %v, want the usual %v", got, healthy)
	}
	fakeEtcd.CutClients(manifest.PeerURL(m), true)
	if got := pass(pod); got != retryStatus {
		t.Errorf("a new silence starts with a wait of %v, want %v", got, retryStatus)
	}

	// A new Pod whose etcd never answered.
	fresh := pod.DeepCopy()
	fresh.UID = types.UID("pod-2")
	waits = nil
	for range 25 {
		waits = append(waits, pass(fresh))
	}
	quick := slices.IndexFunc(waits, func(d time.Duration) bool { return d != retryDiscover })
	if quick < 19 || waits[len(waits)-1] <= retryDiscover {
		t.Errorf("a starting member was asked again after %v: want every %v for its first %v, then less often", waits, retryDiscover, quickFor)
	}
}
