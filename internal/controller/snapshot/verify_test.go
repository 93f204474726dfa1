package snapshot

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/internal/metrics"
)

// stored is a Complete snapshot of the S3 destination, with what the
// snapshot agent recorded.
func stored(verify bool) *v1alpha2.EtcdSnapshot {
	s := snap(s3Dest)
	s.Spec.Verify = verify
	s.Status.Phase = v1alpha2.SnapshotComplete
	s.Status.Artifact = &v1alpha2.SnapshotArtifact{URI: "s3://b/snap.db", SizeBytes: 42, Checksum: "sha256:ab", EtcdVersion: "3.6.16",
		Revision: 7, KeyCount: ptr.To[int64](5), KVHash: ptr.To[int64](99), CompactRevision: -1}
	return s
}

// withMetrics gives the reconciler a registry of its own and returns it.
func (f *fixture) withMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	f.r.Metrics = metrics.New(reg, "test")
	return reg
}

// metricValue is the value of a metric's series with the given labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func (f *fixture) verifyJob() *batchv1.Job {
	f.t.Helper()
	j := &batchv1.Job{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-verify"}, j); err != nil {
		f.t.Fatal(err)
	}
	return j
}

func (f *fixture) noVerifyJob() {
	f.t.Helper()
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "snap-verify"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		f.t.Errorf("a verification Job exists: %v", err)
	}
}

// expectVerified checks the Verified condition (and a part of its message).
func (f *fixture) expectVerified(status metav1.ConditionStatus, reason, text string) *v1alpha2.EtcdSnapshot {
	f.t.Helper()
	s := f.snapshot()
	c := conditions.Get(s.Status.Conditions, conditions.Verified)
	if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, text) {
		f.t.Fatalf("Verified is %+v, want %s %s %q", c, status, reason, text)
	}
	if s.Status.Phase != v1alpha2.SnapshotComplete {
		f.t.Errorf("the verification changed the snapshot: %s", s.Status.Phase)
	}
	return s
}

func TestVerificationPasses(t *testing.T) {
	f := newFixture(t, stored(true), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	reg := f.withMetrics()
	f.reconcile()
	f.expectVerified(metav1.ConditionUnknown, conditions.ReasonVerificationRunning, "snap-verify")
	job := f.verifyJob()
	if img := job.Spec.Template.Spec.Containers[0].Image; img != "quay.io/coreos/etcd:v3.6.16" {
		t.Errorf("the verification runs in %s, not the etcd image of the snapshot's version", img)
	}
	f.reconcile()
	f.expectVerified(metav1.ConditionUnknown, conditions.ReasonVerificationRunning, "is running")

	kv := uint32(99)
	f.finishJob(job, manifest.VerifyAgentContainer, true, string(report.Result{URI: "s3://b/snap.db", Checksum: "sha256:ab", EtcdVersion: "3.6.16",
		Revision: 9, KeyCount: ptr.To[int64](5), KVHash: &kv}.Encode()))
	f.reconcile()
	s := f.expectVerified(metav1.ConditionTrue, conditions.ReasonVerificationPassed, "revision 9, 5 keys")
	v := s.Status.Verification
	if v == nil || v.Revision != 9 || v.KeyCount != 5 || v.KVHash == nil || *v.KVHash != 99 || v.Checksum != "sha256:ab" ||
		v.StartTime == nil || v.CompletionTime == nil {
		t.Errorf("verification %+v", v)
	}
	if n, _ := metricValue(t, reg, "etcd_operator_snapshot_verifications_total", map[string]string{"result": "passed", metrics.LabelCluster: "db"}); n != 1 {
		t.Errorf("%v verifications counted as passed", n)
	}
	if g, ok := metricValue(t, reg, "etcd_operator_snapshot_last_verification_passed", map[string]string{metrics.LabelCluster: "db"}); !ok || g != 1 {
		t.Errorf("last verification gauge %v %v", g, ok)
	}
	// Recorded: the Job goes, and nothing runs it again.
	f.reconcile()
	f.noVerifyJob()
	f.reconcile()
	f.noVerifyJob()
	f.expectVerified(metav1.ConditionTrue, conditions.ReasonVerificationPassed, "")
	if n, _ := metricValue(t, reg, "etcd_operator_snapshot_verifications_total", map[string]string{"result": "passed"}); n != 1 {
		t.Errorf("the verification was counted %v times", n)
	}
}

func TestVerificationFindsAMismatch(t *testing.T) {
	f := newFixture(t, stored(true), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	reg := f.withMetrics()
	f.reconcile()
	f.finishJob(f.verifyJob(), manifest.VerifyAgentContainer, false,
		string(report.Result{Reason: conditions.ReasonMismatch, Message: "s3://b/snap.db has sha256 cd, stored with ab"}.Encode()))
	f.reconcile()
	f.expectVerified(metav1.ConditionFalse, conditions.ReasonMismatch, "stored with ab")
	if !strings.Contains(strings.Join(drain(f.events), "\n"), "Warning "+conditions.ReasonMismatch) {
		t.Error("no Warning Event")
	}
	if n, _ := metricValue(t, reg, "etcd_operator_snapshot_verifications_total", map[string]string{"result": conditions.ReasonMismatch}); n != 1 {
		t.Errorf("%v mismatches counted", n)
	}
	if g, _ := metricValue(t, reg, "etcd_operator_snapshot_last_verification_passed", nil); g != 0 {
		t.Errorf("last verification gauge %v after a failure", g)
	}
	f.reconcile()
	f.verifyJob() // a failed Job stays, for its logs
	f.expectVerified(metav1.ConditionFalse, conditions.ReasonMismatch, "")
}

func TestVerificationJobFailsWithoutAResult(t *testing.T) {
	f := newFixture(t, stored(true), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	f.finishJob(f.verifyJob(), manifest.VerifyAgentContainer, false, "")
	f.reconcile()
	f.expectVerified(metav1.ConditionFalse, conditions.ReasonVerificationFailed, "snap-verify failed")
}

// The operator restarted after it created the Job and before it wrote the
// status: the next pass finds the Job by name and follows it.
func TestVerificationContinuesAfterALostStatusWrite(t *testing.T) {
	f := newFixture(t, stored(true), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	s := f.snapshot()
	s.Status.Verification, s.Status.Conditions = nil, nil
	if err := f.c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	got := f.expectVerified(metav1.ConditionUnknown, conditions.ReasonVerificationRunning, "is running")
	if got.Status.Verification == nil || got.Status.Verification.StartTime == nil {
		t.Errorf("verification %+v", got.Status.Verification)
	}
}

func TestVerificationRunsOnce(t *testing.T) {
	f := newFixture(t, stored(true), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	if err := f.c.Delete(context.Background(), f.verifyJob()); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	f.expectVerified(metav1.ConditionFalse, conditions.ReasonVerificationFailed, "deleted before it reported")
	f.reconcile()
	f.noVerifyJob()
}

func TestVerificationRefusedBeforeAnyJob(t *testing.T) {
	noVersion := stored(true)
	noVersion.Status.Artifact.EtcdVersion = ""
	elsewhere := stored(true)
	elsewhere.Status.Artifact.URI = "s3://other/snap.db"
	for _, tc := range []struct {
		name string
		objs []client.Object
		text string
	}{
		{"no etcd version recorded", []client.Object{noVersion, formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}, "no etcd version"},
		{"artifact outside the destination", []client.Object{elsewhere, formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}, "not in bucket b"},
		{"credentials gone", []client.Object{stored(true), formed()}, conditions.ReasonCredentialsSecretNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.objs...)
			f.reconcile()
			f.expectVerified(metav1.ConditionFalse, conditions.ReasonVerificationFailed, tc.text)
			f.noVerifyJob()
		})
	}
}

func TestNoVerificationUnlessAsked(t *testing.T) {
	f := newFixture(t, stored(false), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	f.noVerifyJob()
	if c := conditions.Get(f.snapshot().Status.Conditions, conditions.Verified); c != nil {
		t.Errorf("Verified %+v on a snapshot that did not ask", c)
	}
}

// The snapshot agent's record reaches the artifact, for the verification to
// compare with.
func TestArtifactRecordsWhatVerificationCompares(t *testing.T) {
	f := newFixture(t, snap(s3Dest), formed(), creds("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
	f.reconcile()
	kv := uint32(4000000000)
	f.finish(true, string(report.Result{URI: "s3://b/snap.db", SizeBytes: 42, Checksum: "sha256:ab", EtcdVersion: "3.6.16",
		Revision: 12, KeyCount: ptr.To[int64](0), KVHash: &kv, CompactRevision: 3}.Encode()))
	f.reconcile()
	a := f.expect(v1alpha2.SnapshotComplete, conditions.ReasonSnapshotStored, "").Status.Artifact
	if a.Revision != 12 || a.KeyCount == nil || *a.KeyCount != 0 || a.KVHash == nil || *a.KVHash != 4000000000 || a.CompactRevision != 3 {
		t.Errorf("artifact %+v", a)
	}
}
