package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

const forceMarkNS = "e2e-forcemark"

func init() { suiteNamespaces = append(suiteNamespaces, forceMarkNS) }

// TestForceMarkByHand puts a recovery's survivor mark
// (etcd-operator.cozystack.io/force-new-cluster) by hand on a healthy
// cluster, with a writer and a reader running (issue 41, claim 3: such a
// mark once gave two members new IDs and lost 19 acknowledged writes): on
// one follower's EtcdMember, and on the other follower's Pod, whose etcd
// container reads the mark at every start. No recovery record backs either,
// so the operator takes each off with a ForceMarkRemoved Warning, restarts
// nothing, and a restart of the Pod's etcd afterwards starts it as the
// member it was. Every member keeps its ID, and no acknowledged write is
// lost.
func TestForceMarkByHand(t *testing.T) {
	t.Parallel()
	ns := namespace(t, forceMarkNS)
	const name = "forcemark"
	newCluster(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 10, time.Minute)
	leader, err := leaderName(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var followers []string
	for _, m := range members(t, ns, name) {
		if m.Name != leader {
			followers = append(followers, m.Name)
		}
	}
	watch := watchCluster(t, ns, name, identityKept(t, ns, name), noRecoveryRuns, noQuorumLoss)

	w.mark("marked")
	onMember, onPod := followers[0], followers[1]
	putMarkByHand(t, ns, "etcdmember/"+onMember)
	waitMarkRemoved(t, ns, name, onMember)
	putMarkByHand(t, ns, "pod/"+onPod)
	waitMarkRemoved(t, ns, name, onPod)
	consistently(t, 5*time.Second, "no member restarted or forced", watch.clean)

	// The mark is off the Pod: its etcd, restarted, runs as the member it was.
	w.mark("restarted")
	restarts := etcdRestarts(t, ns, onPod)
	if err := injector().Kill(context.Background(), ns, onPod, manifest.EtcdContainer); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, onPod+"'s etcd restarted", func() (bool, string) {
		n := etcdRestarts(t, ns, onPod)
		return n > restarts, fmt.Sprintf("%d restarts", n)
	})
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	watch.check(t)
	t.Logf("seen: %s", watch.seen())
	t.Logf("survivor mark put by hand: longest write stall %s while marked, %s around the restart",
		w.longestStall("marked", "restarted").Round(time.Millisecond), w.longestStall("restarted", "").Round(time.Millisecond))
	w.verify("restarted")
}

// putMarkByHand sets the survivor mark on an object (kind/name), as a
// cluster admin would with kubectl. Where the chart's admission guard
// refuses that (it lets only the operator set the mark on an EtcdMember),
// the refusal is checked and the mark is put as the operator's
// ServiceAccount instead: a mark the guard let through (the guard turned
// off, or the object restored from a backup) meets the operator's own
// check, which this drill is about.
func putMarkByHand(t *testing.T, ns, object string) {
	t.Helper()
	mark := manifest.AnnotationForceNewCluster + "=true"
	out, err := kubectl("-n", ns, "annotate", object, mark)
	if err == nil {
		t.Logf("%s marked by the suite's admin", object)
		return
	}
	if !strings.Contains(out, "ValidatingAdmissionPolicy") || !strings.Contains(out, manifest.AnnotationForceNewCluster) {
		t.Fatalf("marking %s: %v\n%s", object, err, out)
	}
	t.Logf("the admission guard refused the admin's mark on %s: %s", object, strings.TrimSpace(out))
	as := "--as=system:serviceaccount:" + operatorNS + ":" + operatorServiceAccount(t)
	if out, err := kubectl("-n", ns, "annotate", object, mark, as); err != nil {
		t.Fatalf("marking %s %s: %v\n%s", object, as, err, out)
	}
	t.Logf("%s marked %s", object, as)
}

// operatorServiceAccount is the main operator's ServiceAccount.
func operatorServiceAccount(t *testing.T) string {
	t.Helper()
	out, err := kubectl("-n", operatorNS, "get", "deploy/"+operatorRelease+"-etcd-operator", "-o", "jsonpath={.spec.template.spec.serviceAccountName}")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("finding the operator's ServiceAccount: %v: %s", err, out)
	}
	return strings.TrimSpace(out)
}

// waitMarkRemoved waits until neither the member nor its Pod holds the
// survivor mark and a ForceMarkRemoved Event names the member.
func waitMarkRemoved(t *testing.T, ns, cluster, member string) {
	t.Helper()
	start := time.Now()
	eventually(t, time.Minute, "the survivor mark taken off "+member, func() (bool, string) {
		for _, m := range members(t, ns, cluster) {
			if mark, ok := m.Annotations[manifest.AnnotationForceNewCluster]; m.Name == member && ok {
				return false, fmt.Sprintf("member %s: %q", member, mark)
			}
		}
		if mark, ok := pods(t, ns, cluster)[member].Annotations[manifest.AnnotationForceNewCluster]; ok {
			return false, fmt.Sprintf("pod %s: %q", member, mark)
		}
		return true, ""
	})
	eventually(t, 30*time.Second, "a ForceMarkRemoved Event for "+member, func() (bool, string) {
		return eventRecorded(t, ns, conditions.ReasonForceMarkRemoved, member), "none"
	})
	t.Logf("mark taken off %s within %s", member, time.Since(start).Round(time.Millisecond))
}
