package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/test/infra/faults"
)

const crashNS = "e2e-crash"

// TestOperatorCrashAtEveryStep runs a second operator, for its own namespace
// only, that ends each of its first lives right after one API write or etcd
// membership change and starts afresh with nothing but what the API server
// and etcd hold: a crash between every pair of calls of a bootstrap, a scale
// down and a scale up. Each converges with etcd's membership exactly the
// members (no stray learner, no missing member) and no acknowledged write
// lost. A real SIGKILL of that operator in the middle of a scale follows.
// This operator copies its binary into member Pods with an init container
// (manager.toolsVolume=copy), where the suite's mounts its image: both ways
// run on real nodes.
func TestOperatorCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	ns := namespace(t, crashNS)
	if err := installOperatorValues(faultsImageRef(t), "eo-crash", ns, false, map[string]string{faults.EnvRestarts: "400"},
		[]string{"manager.toolsVolume=copy"}, ns); err != nil {
		t.Fatal(err)
	}
	const name = "crashy"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	requireToolsVolume(t, ns, name, false)
	w := startWriter(t, ns, name)
	w.mark("crashing")
	setReplicas(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 5*time.Minute)
	setReplicas(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 5*time.Minute)
	lives := strings.Count(crashOperatorLog(t), "Fault injection ended this life")
	if lives < 20 {
		t.Errorf("only %d injected crashes; the scenario should have crashed after every mutation", lives)
	}
	t.Logf("the operator crashed %d times", lives)

	setReplicas(t, ns, name, 5)
	for i := 0; i < 2; i++ {
		eventually(t, 2*time.Minute, "the scale under way", func() (bool, string) {
			return len(members(t, ns, name)) >= 4+i, ""
		})
		killCrashOperator(t)
	}
	waitReconciled(t, ns, name, 5, 5*time.Minute)
	// A roll-out under the same injected crashes (the crashes left are
	// spent on it): each member restarts once.
	setVersion(t, ns, name, "3.7.3")
	waitReconciled(t, ns, name, 5, 10*time.Minute)
	w.mark("converged")
	w.requireWritesBetween("crashing", "converged", 1)
	w.verify("converged")
}

func setVersion(t *testing.T, ns, name, v string) {
	t.Helper()
	patchCluster(t, ns, name, func(c *v1alpha2.EtcdCluster) { c.Spec.Version = v })
}

func crashOperatorLog(t *testing.T) string {
	out, _ := kubectl("-n", crashNS, "logs", "deploy/eo-crash-etcd-operator", "--tail=-1")
	return out
}

// killCrashOperator SIGKILLs the second operator's container.
func killCrashOperator(t *testing.T) {
	t.Helper()
	list, err := kubectl("-n", crashNS, "get", "pods", "-l", "control-plane=controller-manager", "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		t.Fatal(err)
	}
	if err := injector().Kill(context.Background(), crashNS, strings.TrimSpace(list), "manager"); err != nil {
		t.Fatal(err)
	}
}
