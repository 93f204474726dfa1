package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type fixture struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha2.EtcdSnapshot{}, &batchv1.Job{}).Build()
	f := &fixture{t: t, c: c, clock: clocktesting.NewFakeClock(t0), events: events.NewFakeRecorder(100)}
	f.r = &Reconciler{Client: c, APIReader: c, Recorder: f.events, Clock: f.clock, OperatorImage: "op:1"}
	return f
}

func (f *fixture) reconcile() ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "snap"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) snapshot() *v1alpha2.EtcdSnapshot {
	f.t.Helper()
	s := &v1alpha2.EtcdSnapshot{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap"}, s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) job() *batchv1.Job {
	f.t.Helper()
	j := &batchv1.Job{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-snapshot"}, j); err != nil {
		f.t.Fatal(err)
	}
	return j
}

// expect checks the snapshot's phase and Ready reason (and a part of its
// message).
func (f *fixture) expect(phase v1alpha2.SnapshotPhase, reason, text string) *v1alpha2.EtcdSnapshot {
	f.t.Helper()
	s := f.snapshot()
	c := conditions.Get(s.Status.Conditions, conditions.Ready)
	if s.Status.Phase != phase || c == nil || c.Reason != reason || !strings.Contains(c.Message, text) {
		f.t.Fatalf("snapshot is %s %+v, want %s %s %q", s.Status.Phase, c, phase, reason, text)
	}
	return s
}

// finish marks the Job done with one Pod that left msg.
func (f *fixture) finish(ok bool, msg string) {
	f.t.Helper()
	f.finishJob(f.job(), manifest.SnapshotAgentContainer, ok, msg)
}

// finishJob marks a Job done with one Pod whose container left msg.
func (f *fixture) finishJob(job *batchv1.Job, container string, ok bool, msg string) {
	f.t.Helper()
	typ, phase := batchv1.JobComplete, corev1.PodSucceeded
	if !ok {
		typ, phase = batchv1.JobFailed, corev1.PodFailed
	}
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: "X", Message: "y"})
	job.Status.CompletionTime = &metav1.Time{Time: f.clock.Now()}
	if err := f.c.Status().Update(context.Background(), job); err != nil {
		f.t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-abcde", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			Name: container, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg}},
		}}},
	}
	if err := f.c.Create(context.Background(), pod); err != nil {
		f.t.Fatal(err)
	}
}

func snap(dest v1alpha2.SnapshotLocation) *v1alpha2.EtcdSnapshot {
	return &v1alpha2.EtcdSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "ns", UID: "snap-uid", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       v1alpha2.EtcdSnapshotSpec{ClusterRef: corev1.LocalObjectReference{Name: "db"}, Destination: dest},
	}
}

func formed(mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	c := &v1alpha2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "c-uid"},
		Spec: v1alpha2.EtcdClusterSpec{Version: "3.6.16"}, Status: v1alpha2.EtcdClusterStatus{ClusterID: "00000000000000aa"}}
	for _, m := range mods {
		m(c)
	}
	return c
}

var (
	s3Dest = v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "http://s3", Bucket: "b",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}}}
	pvcDest = v1alpha2.SnapshotLocation{PVC: &v1alpha2.PVCLocation{ClaimName: "backups"}}
	// s3WithCA names a CA Secret that no test creates.
	s3WithCA = v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3", Bucket: "b",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"}, CASecretRef: &corev1.LocalObjectReference{Name: "store-ca"}}}
	// s3WithCustomerKey encrypts with the key of Secret sse-key.
	s3WithCustomerKey = v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{Endpoint: "https://s3", Bucket: "b",
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "creds"},
		SSE:                  &v1alpha2.S3Encryption{Type: v1alpha2.SSETypeCustomer, CustomerKeySecretRef: &corev1.LocalObjectReference{Name: "sse-key"}}}}
)

func sseKey(value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sse-key", Namespace: "ns"}, Data: map[string][]byte{"key": []byte(value)}}
}

func creds(keys ...string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns"}, Data: map[string][]byte{}}
	for _, k := range keys {
		s.Data[k] = []byte("v")
	}
	return s
}

func TestSnapshotStoredThroughTheJob(t *testing.T) {
	f := newFixture(t, snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	f.expect(v1alpha2.SnapshotStarted, conditions.ReasonJobCreated, "snap-snapshot")
	if j := f.job(); j.Spec.Template.Spec.Containers[0].Image != "op:1" {
		t.Errorf("job image %s", j.Spec.Template.Spec.Containers[0].Image)
	}
	f.reconcile()
	f.expect(v1alpha2.SnapshotStarted, conditions.ReasonJobRunning, "")

	res := report.Result{URI: "s3://b/snap.db", SizeBytes: 42, Checksum: "sha256:ab", EtcdVersion: "3.6.16", PrunedCount: 1, Pruned: []string{"s3://b/old.db"}}
	f.finish(true, string(res.Encode()))
	f.reconcile()
	s := f.expect(v1alpha2.SnapshotComplete, conditions.ReasonSnapshotStored, "s3://b/snap.db")
	a := s.Status.Artifact
	if a.URI != res.URI || a.SizeBytes != 42 || a.Checksum != "sha256:ab" || a.EtcdVersion != "3.6.16" || s.Status.CompletionTime == nil {
		t.Errorf("artifact %+v", a)
	}
	if r := s.Status.Retention; r == nil || r.PrunedCount != 1 || r.Pruned[0] != "s3://b/old.db" {
		t.Errorf("retention %+v", r)
	}
	// The result is recorded: the Job (and its Pod) go.
	f.reconcile()
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-snapshot"}, &batchv1.Job{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the finished Job is still there: %v", err)
	}
	// Final: nothing changes it any more.
	f.reconcile()
	f.expect(v1alpha2.SnapshotComplete, conditions.ReasonSnapshotStored, "")
}

func TestSnapshotFailsWithTheAgentsReason(t *testing.T) {
	f := newFixture(t, snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	f.finish(false, string(report.Result{Reason: conditions.ReasonBucketNotFound, Message: "bucket b does not exist"}.Encode()))
	f.reconcile()
	f.expect(v1alpha2.SnapshotFailed, conditions.ReasonBucketNotFound, "bucket b does not exist")
	f.reconcile()
	f.job() // a failed Job stays, for its logs
	if !strings.Contains(strings.Join(drain(f.events), "\n"), "Warning "+conditions.ReasonBucketNotFound) {
		t.Error("no Warning Event")
	}
}

func TestSnapshotFailsWithTheJobsReason(t *testing.T) {
	f := newFixture(t, snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	f.finish(false, "")
	f.reconcile()
	f.expect(v1alpha2.SnapshotFailed, conditions.ReasonJobFailed, "snap-snapshot failed")
}

func TestSnapshotRefusedBeforeAnyJob(t *testing.T) {
	ready := creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
	for _, tc := range []struct {
		name   string
		objs   []client.Object
		image  string
		reason string
	}{
		{"no operator image", []client.Object{snap(s3Dest), formed(), ready}, "", conditions.ReasonOperatorImageNotConfigured},
		{"no cluster", []client.Object{snap(s3Dest), ready}, "op:1", conditions.ReasonClusterNotFound},
		{"no credentials Secret", []client.Object{snap(s3Dest), formed()}, "op:1", conditions.ReasonCredentialsSecretNotFound},
		{"credentials without the secret key", []client.Object{snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID")}, "op:1", conditions.ReasonCredentialsSecretInvalid},
		{"no claim", []client.Object{snap(pvcDest), formed()}, "op:1", conditions.ReasonPVCNotFound},
		{"no CA Secret", []client.Object{snap(s3WithCA), formed(), ready}, "op:1", conditions.ReasonInvalidDestination},
		{"no customer key Secret", []client.Object{snap(s3WithCustomerKey), formed(), ready}, "op:1", conditions.ReasonInvalidDestination},
		{"a customer key of 16 bytes", []client.Object{snap(s3WithCustomerKey), formed(), ready, sseKey("MDEyMzQ1Njc4OWFiY2RlZg==")}, "op:1",
			conditions.ReasonInvalidDestination},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.objs...)
			f.r.OperatorImage = tc.image
			f.reconcile()
			f.expect(v1alpha2.SnapshotFailed, tc.reason, "")
			if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-snapshot"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("a Job was created: %v", err)
			}
		})
	}
}

func TestSnapshotWaitsForTheCluster(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "backups", Namespace: "ns"}}
	for _, tc := range []struct {
		name    string
		cluster *v1alpha2.EtcdCluster
		timeout string
	}{
		{"not formed", formed(func(c *v1alpha2.EtcdCluster) { c.Status.ClusterID = "" }), conditions.ReasonClusterNotFormed},
		{"auth not on yet", formed(func(c *v1alpha2.EtcdCluster) {
			c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
		}), conditions.ReasonAuthLatchTimeout},
		{"TLS hand-over under way", formed(func(c *v1alpha2.EtcdCluster) {
			c.Status.Conditions = []metav1.Condition{{Type: conditions.TLSHandover, Status: metav1.ConditionTrue, Reason: conditions.ReasonRollingMembers}}
		}), conditions.ReasonTLSHandoverTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, snap(pvcDest), tc.cluster, claim)
			res := f.reconcile()
			f.expect(v1alpha2.SnapshotPending, conditions.ReasonWaitingForCluster, "db")
			if res.RequeueAfter != waitForCluster {
				t.Errorf("comes back after %s, want the deadline %s", res.RequeueAfter, waitForCluster)
			}
			f.clock.Step(waitForCluster + time.Second)
			f.reconcile()
			f.expect(v1alpha2.SnapshotFailed, tc.timeout, "")
		})
	}
}

func TestSnapshotJobLostIsNeverRunAgain(t *testing.T) {
	f := newFixture(t, snap(pvcDest), formed(), &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "backups", Namespace: "ns"}})
	f.reconcile()
	if err := f.c.Delete(context.Background(), f.job()); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	f.expect(v1alpha2.SnapshotFailed, conditions.ReasonSnapshotJobLost, "")
	f.reconcile()
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-snapshot"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("the snapshot ran again: %v", err)
	}
}

func TestSnapshotJobNameTaken(t *testing.T) {
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "snap-snapshot", Namespace: "ns"}}
	f := newFixture(t, snap(pvcDest), formed(), other)
	f.reconcile()
	f.expect(v1alpha2.SnapshotFailed, conditions.ReasonJobNameTaken, "")
}

func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A finished snapshot is counted once, by result, and a stored one sets the
// last-success gauges a "snapshot too old" alert reads.
func TestSnapshotMetrics(t *testing.T) {
	f := newFixture(t, snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	reg := f.withMetrics()
	f.reconcile()
	f.finish(true, string(report.Result{URI: "s3://b/snap.db", SizeBytes: 42, Checksum: "sha256:ab", EtcdVersion: "3.6.16"}.Encode()))
	f.reconcile()
	f.expect(v1alpha2.SnapshotComplete, conditions.ReasonSnapshotStored, "")
	f.reconcile()
	if n, _ := metricValue(t, reg, "etcd_operator_snapshots_total", map[string]string{"result": metrics.SnapshotStored, metrics.LabelCluster: "db"}); n != 1 {
		t.Errorf("%v stored snapshots counted, want 1", n)
	}
	if g, ok := metricValue(t, reg, "etcd_operator_snapshot_last_size_bytes", map[string]string{metrics.LabelCluster: "db", "schedule": ""}); !ok || g != 42 {
		t.Errorf("last size %v (%v), want 42", g, ok)
	}
	if g, ok := metricValue(t, reg, "etcd_operator_snapshot_last_success_timestamp_seconds", nil); !ok || g <= 0 {
		t.Errorf("last success time %v (%v)", g, ok)
	}

	failed := newFixture(t, snap(s3Dest), formed())
	reg = failed.withMetrics()
	failed.reconcile()
	failed.expect(v1alpha2.SnapshotFailed, conditions.ReasonCredentialsSecretNotFound, "")
	failed.reconcile()
	if n, _ := metricValue(t, reg, "etcd_operator_snapshots_total", map[string]string{"result": conditions.ReasonCredentialsSecretNotFound}); n != 1 {
		t.Errorf("%v failures counted, want 1", n)
	}
	if _, ok := metricValue(t, reg, "etcd_operator_snapshot_last_success_timestamp_seconds", nil); ok {
		t.Error("a failed snapshot set the last success time")
	}
}
