package manifest

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// LabelDefragPolicy names the EtcdDefragPolicy on the runs it made.
const LabelDefragPolicy = Prefix + "defrag-policy"

// DefragRunName is the name of a policy's run for a tick: the same tick
// always gets the same name, so it is made once whatever restarts.
func DefragRunName(policy string, tick time.Time) string {
	return fmt.Sprintf("%s-%d", policy, tick.Unix())
}

// DefragRun is the EtcdDefrag a policy makes for a tick: its cluster, a
// copy of its rule and TTL, labelled with the policy and the cluster, and
// controlled by the policy so that deleting the policy deletes its runs.
func DefragRun(p *v1alpha2.EtcdDefragPolicy, tick time.Time) *v1alpha2.EtcdDefrag {
	return &v1alpha2.EtcdDefrag{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DefragRunName(p.Name, tick),
			Namespace: p.Namespace,
			Labels:    map[string]string{LabelDefragPolicy: p.Name, LabelCluster: p.Spec.ClusterRef.Name},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(p, v1alpha2.GroupVersion.WithKind("EtcdDefragPolicy")),
			},
		},
		Spec: v1alpha2.EtcdDefragSpec{
			ClusterRef:              p.Spec.ClusterRef,
			Rule:                    p.Spec.Rule.DeepCopy(),
			TTLSecondsAfterFinished: copyInt32(p.Spec.TTLSecondsAfterFinished),
		},
	}
}

func copyInt32(v *int32) *int32 {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
