package kubectletcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// ClusterRow is one EtcdCluster in `status -A`: what the operator reports
// of it, read from the API alone (no member is dialled, so a fleet of
// hundreds reads in one list).
type ClusterRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Available is the Available condition's status (True, False,
	// Unknown; empty before the operator wrote one), Reason its reason.
	Available string `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// ReadyMembers of Replicas are healthy voters by etcd's own report.
	ReadyMembers int32 `json:"readyMembers"`
	Replicas     int32 `json:"replicas"`
	// Version is the version the operator works towards; ClusterVersion
	// etcd's own (major.minor).
	Version        string `json:"version,omitempty"`
	ClusterVersion string `json:"clusterVersion,omitempty"`
	// Progressing is the Progressing condition's reason while it is True.
	Progressing string `json:"progressing,omitempty"`
	// LastSnapshot is when the latest complete EtcdSnapshot of the
	// cluster completed.
	LastSnapshot *metav1.Time `json:"lastSnapshot,omitempty"`
	// Alarms is what the Degraded condition says of etcd's alarms.
	Alarms string `json:"alarms,omitempty"`
}

// ClusterStatusList is what `status -A` prints.
type ClusterStatusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []ClusterRow `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *ClusterStatusList) DeepCopyObject() runtime.Object {
	out := &ClusterStatusList{TypeMeta: l.TypeMeta, Items: slices.Clone(l.Items)}
	for i := range out.Items {
		if t := out.Items[i].LastSnapshot; t != nil {
			out.Items[i].LastSnapshot = t.DeepCopy()
		}
	}
	return out
}

func (l *ClusterStatusList) itemNames() (string, []string) {
	var names []string
	for _, r := range l.Items {
		names = append(names, r.Namespace+"/"+r.Name)
	}
	return "EtcdCluster", names
}

// fleet reads every EtcdCluster the client may list (all namespaces) and
// their snapshots.
func fleet(ctx context.Context, kube client.Client) ([]ClusterRow, error) {
	clusters := &v1alpha2.EtcdClusterList{}
	if err := kube.List(ctx, clusters); err != nil {
		return nil, fmt.Errorf("listing EtcdClusters in every namespace: %w", err)
	}
	snapshots := &v1alpha2.EtcdSnapshotList{}
	if err := kube.List(ctx, snapshots); err != nil {
		return nil, fmt.Errorf("listing EtcdSnapshots in every namespace: %w", err)
	}
	last := map[string]*metav1.Time{}
	for i := range snapshots.Items {
		s := &snapshots.Items[i]
		key := s.Namespace + "/" + s.Spec.ClusterRef.Name
		if t := s.Status.CompletionTime; s.Status.Phase == v1alpha2.SnapshotComplete && t != nil && (last[key] == nil || last[key].Before(t)) {
			last[key] = t
		}
	}
	rows := make([]ClusterRow, 0, len(clusters.Items))
	for i := range clusters.Items {
		rows = append(rows, clusterRow(&clusters.Items[i], last[clusters.Items[i].Namespace+"/"+clusters.Items[i].Name]))
	}
	slices.SortFunc(rows, func(a, b ClusterRow) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return rows, nil
}

func clusterRow(c *v1alpha2.EtcdCluster, lastSnapshot *metav1.Time) ClusterRow {
	r := ClusterRow{Namespace: c.Namespace, Name: c.Name, ReadyMembers: c.Status.ReadyMembers, Version: c.Spec.Version,
		ClusterVersion: c.Status.ClusterVersion, LastSnapshot: lastSnapshot}
	if c.Spec.Replicas != nil {
		r.Replicas = *c.Spec.Replicas
	}
	if a := conditions.Get(c.Status.Conditions, conditions.Available); a != nil {
		r.Available, r.Reason = string(a.Status), a.Reason
	}
	if p := conditions.Get(c.Status.Conditions, conditions.Progressing); p != nil && p.Status == metav1.ConditionTrue {
		r.Progressing = p.Reason
	}
	if d := conditions.Get(c.Status.Conditions, conditions.Degraded); d != nil && d.Reason == conditions.ReasonAlarm {
		r.Alarms = d.Message
	}
	return r
}

// fleetTable is the human form of rows; wide adds the condition's reason
// and etcd's cluster version.
func fleetTable(rows []ClusterRow, now time.Time) func(wide bool) table {
	return func(wide bool) table {
		t := table{header: []string{"NAMESPACE", "NAME", "AVAILABLE", "MEMBERS", "VERSION", "PROGRESSING", "LAST SNAPSHOT", "ALARMS"}}
		if wide {
			t.header = append(t.header, "REASON", "CLUSTER VERSION")
		}
		for _, r := range rows {
			snap := "-"
			if r.LastSnapshot != nil {
				snap = shortAge(now.Sub(r.LastSnapshot.Time)) + " ago"
			}
			row := []string{r.Namespace, r.Name, orDash(r.Available), fmt.Sprintf("%d/%d", r.ReadyMembers, r.Replicas), orDash(r.Version),
				orDash(r.Progressing), snap, orDash(r.Alarms)}
			if wide {
				row = append(row, orDash(r.Reason), orDash(r.ClusterVersion))
			}
			t.rows = append(t.rows, row)
		}
		return t
	}
}

// shortAge renders a duration as kubectl's AGE column does, roughly.
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// unavailable fails the command when a cluster is not Available.
func unavailable(rows []ClusterRow) error {
	n := 0
	for _, r := range rows {
		if r.Available != string(metav1.ConditionTrue) {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d clusters are not Available", n, len(rows))
	}
	return nil
}
