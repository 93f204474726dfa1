package main

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	defragpolicycontroller "github.com/seed74754924/etcd-operator/internal/controller/defragpolicy"
)

// setupDefragPolicies registers the EtcdDefragPolicy controller, which
// makes EtcdDefrag runs on a schedule (the EtcdDefrag controller runs them).
func setupDefragPolicies(mgr ctrl.Manager) error {
	pr := &defragpolicycontroller.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("etcd-operator")}
	if err := pr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EtcdDefragPolicy controller: %w", err)
	}
	return nil
}
