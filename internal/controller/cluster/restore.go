package cluster

import (
	"fmt"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// seedProgress says what the cluster waits for while its seed is not ready:
// for a restored cluster, how the restore goes, and why it fails, which the
// seed reports from its restore agent.
func seedProgress(seed *v1alpha2.EtcdMember) (reason, message string) {
	if c := conditions.Get(seed.Status.Conditions, conditions.Ready); c != nil && seed.Spec.Restore != nil {
		switch c.Reason {
		case conditions.ReasonRestoreFailed, conditions.ReasonRestoring, conditions.ReasonOperatorImageNotConfigured:
			return c.Reason, fmt.Sprintf("Seed member %s: %s", seed.Name, c.Message)
		}
	}
	return conditions.ReasonWaitingForSeed, fmt.Sprintf("Waiting for seed member %s to become ready", seed.Name)
}
