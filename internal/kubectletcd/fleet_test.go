package kubectletcd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

func withConditions(cs ...metav1.Condition) func(*v1alpha2.EtcdCluster) {
	return func(c *v1alpha2.EtcdCluster) { c.Status.Conditions = cs }
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// status -A: one line per cluster of every namespace, from the API alone;
// exit 1 while one is not Available.
func TestFleetStatus(t *testing.T) {
	healthy := cluster("a", withConditions(cond(conditions.Available, metav1.ConditionTrue, "QuorumAvailable", ""),
		cond(conditions.Progressing, metav1.ConditionFalse, conditions.ReasonReconciled, "")), func(c *v1alpha2.EtcdCluster) {
		c.Namespace, c.Status.ReadyMembers = "team-1", 3
	})
	alarmed := cluster("b", withConditions(cond(conditions.Available, metav1.ConditionFalse, "QuorumLost", ""),
		cond(conditions.Progressing, metav1.ConditionTrue, conditions.ReasonRollingOut, ""),
		cond(conditions.Degraded, metav1.ConditionTrue, conditions.ReasonAlarm, "NOSPACE on b-x")), func(c *v1alpha2.EtcdCluster) {
		c.Namespace, c.Status.ReadyMembers = "team-2", 1
	})
	done := metav1.NewTime(time.Now().Add(-3 * time.Hour))
	older := metav1.NewTime(time.Now().Add(-30 * time.Hour))
	snap := func(name string, at metav1.Time, phase v1alpha2.SnapshotPhase) *v1alpha2.EtcdSnapshot {
		s := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "team-1", Name: name}}
		s.Spec.ClusterRef.Name = "a"
		s.Status.Phase, s.Status.CompletionTime = phase, &at
		return s
	}
	env := newFakeEnv(t, newFakeEtcd(), healthy, alarmed, snap("s1", older, v1alpha2.SnapshotComplete), snap("s2", done, v1alpha2.SnapshotComplete),
		snap("s3", metav1.NewTime(time.Now()), v1alpha2.SnapshotFailed))
	code, out, errOut := env.run("status", "-A")
	if code != 1 || !strings.Contains(errOut, "1 of 2 clusters are not Available") {
		t.Errorf("exit %d, stderr %q; want 1 and the count", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", out)
	}
	a, b := fields(lines[1]), lines[2]
	if a[0] != "team-1" || a[1] != "a" || a[2] != "True" || a[3] != "3/3" || a[4] != "3.6.16" || a[5] != "-" || a[6] != "3h" {
		t.Errorf("healthy row: %q", lines[1])
	}
	if !strings.Contains(b, "team-2") || !strings.Contains(b, "False") || !strings.Contains(b, "1/3") ||
		!strings.Contains(b, conditions.ReasonRollingOut) || !strings.Contains(b, "NOSPACE on b-x") {
		t.Errorf("alarmed row: %q", b)
	}
	code, out, _ = env.run("status", "-A", "-o", "json")
	var list ClusterStatusList
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 1 || list.Kind != "ClusterStatusList" || len(list.Items) != 2 ||
		list.Items[0].LastSnapshot == nil || list.Items[0].LastSnapshot.Unix() != done.Unix() {
		t.Errorf("-o json: exit %d, %v\n%s", code, err, out)
	}
	if code, _, errOut := env.run("status", "-A", "-c", "a"); code != 2 || !strings.Contains(errOut, "leave out") {
		t.Errorf("-A with -c: exit %d, %q", code, errOut)
	}
}
