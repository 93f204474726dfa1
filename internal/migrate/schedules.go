package migrate

import (
	"context"
	"fmt"
	"io"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// The legacy operator's backup kinds (cozystack v0.4.3 to v0.4.5, in the
// legacy group).
var (
	LegacyScheduleGVK = schema.GroupVersionKind{Group: LegacyGVR.Group, Version: LegacyGVR.Version, Kind: "EtcdBackupSchedule"}
	LegacyBackupGVK   = schema.GroupVersionKind{Group: LegacyGVR.Group, Version: LegacyGVR.Version, Kind: "EtcdBackup"}
)

// legacyScheduleLabel is the label the legacy operator puts on the CronJob
// of a schedule.
const legacyScheduleLabel = "etcd.aenix.io/etcdbackupschedule-name"

// legacyBackupSpec is the spec shared by the legacy EtcdBackup and
// EtcdBackupSchedule; its destination has this API's shape field for field.
type legacyBackupSpec struct {
	ClusterRef                 corev1.LocalObjectReference `json:"clusterRef"`
	Destination                v1alpha2.SnapshotLocation   `json:"destination"`
	Schedule                   string                      `json:"schedule,omitempty"`
	SuccessfulJobsHistoryLimit *int32                      `json:"successfulJobsHistoryLimit,omitempty"`
	FailedJobsHistoryLimit     *int32                      `json:"failedJobsHistoryLimit,omitempty"`
}

// SchedulePlan carries one legacy EtcdBackupSchedule to an
// EtcdSnapshotSchedule of the same name, once its cluster is adopted.
type SchedulePlan struct {
	Legacy   *unstructured.Unstructured
	Schedule *v1alpha2.EtcdSnapshotSchedule
	// Refusal says why the schedule cannot be carried; Waiting why not now.
	Refusal, Waiting string
	Notes            []string
}

// PlanSchedule translates a legacy schedule. adopted reports whether the
// cluster it names is (or is about to be) adopted.
func PlanSchedule(u *unstructured.Unstructured, adopted func(cluster string) bool) *SchedulePlan {
	p := &SchedulePlan{Legacy: u}
	spec, err := readBackupSpec(u)
	switch {
	case err != nil:
		p.Refusal = err.Error()
		return p
	case spec.Schedule == "":
		p.Refusal = "spec.schedule is empty"
		return p
	}
	s := &v1alpha2.EtcdSnapshotSchedule{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha2.GroupVersion.String(), Kind: "EtcdSnapshotSchedule"},
		ObjectMeta: metav1.ObjectMeta{
			Name: u.GetName(), Namespace: u.GetNamespace(),
			Labels:      u.GetLabels(),
			Annotations: map[string]string{MigratedFromAnnotation: string(u.GetUID())},
		},
		Spec: v1alpha2.EtcdSnapshotScheduleSpec{
			Schedule: spec.Schedule,
			SnapshotTemplate: v1alpha2.EtcdSnapshotTemplate{Spec: v1alpha2.EtcdSnapshotSpec{
				ClusterRef: spec.ClusterRef, Destination: spec.Destination,
			}},
			SuccessfulSnapshotsHistoryLimit: spec.SuccessfulJobsHistoryLimit,
			FailedSnapshotsHistoryLimit:     spec.FailedJobsHistoryLimit,
		},
	}
	p.Schedule = s
	p.Notes = []string{
		"the schedule's times are read in UTC (timeZone unset); the legacy CronJob used the kube-controller-manager's time zone, UTC unless it was started otherwise",
		"no retention: the legacy schedule kept every backup, and so does this one until spec.retention is set; only snapshots it makes itself are ever deleted by it",
		"snapshots are named <schedule>-<slot>.db (the legacy ones <schedule>-<timestamp>.db): the legacy files stay where they are",
		"the legacy history limits counted Jobs, these count EtcdSnapshot objects",
	}
	if !adopted(spec.ClusterRef.Name) {
		p.Waiting = fmt.Sprintf("its cluster %s is not adopted in this run: the schedule is left to the legacy operator until it is", spec.ClusterRef.Name)
	}
	return p
}

func readBackupSpec(u *unstructured.Unstructured) (*legacyBackupSpec, error) {
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	spec := &legacyBackupSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, spec); err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	if spec.ClusterRef.Name == "" {
		return nil, fmt.Errorf("spec.clusterRef.name is empty")
	}
	if (spec.Destination.S3 == nil) == (spec.Destination.PVC == nil) {
		return nil, fmt.Errorf("spec.destination needs exactly one of s3 and pvc")
	}
	return spec, nil
}

// Render prints the schedule's plan.
func (p *SchedulePlan) Render(w io.Writer) error {
	fmt.Fprintf(w, "=== EtcdBackupSchedule.etcd.aenix.io %s/%s\n", p.Legacy.GetNamespace(), p.Legacy.GetName())
	if p.Refusal != "" {
		fmt.Fprintf(w, "REFUSED: this schedule is left untouched: %s\n\n", p.Refusal)
		return nil
	}
	if p.Waiting != "" {
		fmt.Fprintf(w, "WAITING: %s\n", p.Waiting)
	}
	fmt.Fprintln(w, "Notes:")
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	b, err := yaml.Marshal(p.Schedule)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Object to create:\n---\n%s", b)
	fmt.Fprintln(w, "On --apply, once the cluster is adopted: create the EtcdSnapshotSchedule, then delete the legacy schedule and its CronJob (its Jobs and the backups they wrote stay)")
	fmt.Fprintln(w)
	return nil
}

// ApplySchedule carries one schedule: the new schedule first, then the
// legacy one goes with its CronJob, so a run stopped in between finishes on
// the next.
func ApplySchedule(ctx context.Context, c client.Client, p *SchedulePlan) error {
	if p.Refusal != "" || p.Waiting != "" {
		return fmt.Errorf("not ready to carry: %s%s", p.Refusal, p.Waiting)
	}
	ns, name := p.Legacy.GetNamespace(), p.Legacy.GetName()
	have := &v1alpha2.EtcdSnapshotSchedule{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, p.Schedule.DeepCopy()); err != nil {
			return fmt.Errorf("creating EtcdSnapshotSchedule %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("reading EtcdSnapshotSchedule %s: %w", name, err)
	case have.Annotations[MigratedFromAnnotation] != string(p.Legacy.GetUID()):
		return fmt.Errorf("an EtcdSnapshotSchedule %s exists that etcd-migrate did not make from this schedule: rename one of them", name)
	}
	// The legacy operator owns its CronJob through the schedule; delete it
	// by its label too, in case the owner reference is missing.
	jobs := &batchv1.CronJobList{}
	if err := c.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{legacyScheduleLabel: name}); err != nil {
		return fmt.Errorf("listing the legacy schedule's CronJobs: %w", err)
	}
	for i := range jobs.Items {
		if err := c.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationOrphan)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting CronJob %s: %w", jobs.Items[i].Name, err)
		}
	}
	legacy := p.Legacy.DeepCopy()
	if err := c.Delete(ctx, legacy, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the legacy EtcdBackupSchedule: %w", err)
	}
	return nil
}

// BackupRecord is what the tool reports of a legacy EtcdBackup: it is left
// as it is, a record of a backup the legacy operator took.
type BackupRecord struct {
	Namespace, Name, Cluster, Phase, URI string
}

// Render prints what becomes of the legacy backup.
func (b BackupRecord) Render(w io.Writer) {
	fmt.Fprintf(w, "=== EtcdBackup.etcd.aenix.io %s/%s (cluster %s, phase %s)\n", b.Namespace, b.Name, b.Cluster, b.Phase)
	switch {
	case b.Phase == "Complete" && b.URI != "":
		fmt.Fprintf(w, "Kept as it is: the record of a finished backup at %s. To restore it into a new cluster, name it in spec.bootstrap.restore.source of an EtcdCluster (docs/operations.md, Restoring).\n\n", b.URI)
	case b.Phase == "Complete" || b.Phase == "Failed":
		fmt.Fprintf(w, "Kept as it is: the record of a %s backup.\n\n", b.Phase)
	default:
		fmt.Fprintln(w, "Kept as it is: it never finished, and the stopped legacy operator will not finish it. Create an EtcdSnapshot (same clusterRef and destination) to take a backup now.")
		fmt.Fprintln(w)
	}
}

// listLegacyKind lists legacy objects of a kind; a missing CRD means none.
func listLegacyKind(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing legacy %ss: %w", gvk.Kind, err)
	}
	var out []unstructured.Unstructured
	for _, u := range list.Items {
		if u.GetDeletionTimestamp() == nil {
			out = append(out, u)
		}
	}
	return out, nil
}

// backupRecords reads the legacy backups.
func backupRecords(items []unstructured.Unstructured) []BackupRecord {
	var out []BackupRecord
	for _, u := range items {
		cluster, _, _ := unstructured.NestedString(u.Object, "spec", "clusterRef", "name")
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		uri, _, _ := unstructured.NestedString(u.Object, "status", "snapshot", "uri")
		if phase == "" {
			phase = "Pending"
		}
		out = append(out, BackupRecord{Namespace: u.GetNamespace(), Name: u.GetName(), Cluster: cluster, Phase: phase, URI: uri})
	}
	return out
}
