package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// namespace creates the suite's namespace and, when the test fails, dumps
// what is in it.
func namespace(t *testing.T, name string) string {
	t.Helper()
	if !slices.Contains(suiteNamespaces, name) && name != crashNS && name != scheduleNS && name != migrateNS && name != migrateTLSNS && name != migrateRefusalsNS {
		t.Fatalf("namespace %s is not watched by the operator: add it to suiteNamespaces", name)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, name)
		}
		release(t, name)
	})
	return name
}

// release deletes what a finished suite left running in its namespace (its
// clusters, snapshots and servers), without waiting: dozens of idle etcd
// clusters starve a small machine, and the suites still running with them.
// The namespace itself stays: the operator watches it.
func release(t *testing.T, ns string) {
	// The chart guards EtcdCluster deletion: the break-glass annotation
	// first, as a person deleting a cluster on purpose does.
	if out, err := kubectl("-n", ns, "annotate", "--overwrite", "etcdclusters", "--all", manifest.AnnotationAllowDeletion+"=true"); err != nil {
		t.Logf("marking namespace %s's clusters for deletion: %v: %s", ns, err, out)
	}
	if out, err := kubectl("-n", ns, "delete", "--wait=false", "--ignore-not-found",
		"etcdclusters,etcdsnapshotschedules,etcddefragpolicies,etcdsnapshots,deployments,statefulsets,jobs", "--all"); err != nil {
		t.Logf("releasing namespace %s: %v: %s", ns, err, out)
	}
	list := &corev1.PodList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range list.Items {
		if p := &list.Items[i]; len(p.OwnerReferences) == 0 {
			_ = k.Delete(context.Background(), p)
		}
	}
}

// dumpNamespace logs what a failed suite's namespace holds, each line
// starting "context: " so that testtimes quotes the failure, not the dump.
func dumpNamespace(t *testing.T, ns string) {
	for _, args := range [][]string{
		{"get", "etcdcluster,etcdmember,pods,pvc,pdb", "-o", "wide"},
		{"get", "etcdcluster", "-o", "yaml"},
		{"get", "etcdmember", "-o", "yaml"},
		{"get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, _ := kubectl(append([]string{"-n", ns}, args...)...)
		t.Logf("context: kubectl -n %s %s\n%s", ns, strings.Join(args, " "), out)
	}
	out, _ := kubectl("-n", operatorNS, "logs", "deploy/eo-etcd-operator", "--tail=2000")
	var mine []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"`+ns+`"`) {
			mine = append(mine, line)
		}
	}
	if len(mine) > 300 {
		mine = mine[len(mine)-300:]
	}
	t.Logf("context: operator log lines of %s:\n%s", ns, strings.Join(mine, "\n"))
	dumpCrashes(t, ns)
}

// dumpCrashes logs, for every container of the namespace that has
// restarted, its last termination message and the tail of its previous
// run's log; and the log of any operator that runs in the namespace itself.
func dumpCrashes(t *testing.T, ns string) {
	list := &corev1.PodList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return
	}
	for _, p := range list.Items {
		if strings.Contains(p.Name, "etcd-operator") {
			out, _ := kubectl("-n", ns, "logs", p.Name, "--all-containers", "--tail=300")
			t.Logf("context: log of operator pod %s/%s:\n%s", ns, p.Name, out)
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount == 0 {
				continue
			}
			if last := cs.LastTerminationState.Terminated; last != nil {
				t.Logf("context: pod %s container %s: %d restarts, last exit %d (%s), termination message:\n%s",
					p.Name, cs.Name, cs.RestartCount, last.ExitCode, last.Reason, last.Message)
			}
			out, _ := kubectl("-n", ns, "logs", p.Name, "-c", cs.Name, "--previous", "--tail=40")
			t.Logf("context: pod %s container %s, previous run's log tail:\n%s", p.Name, cs.Name, out)
		}
	}
}

// eventually polls cond until it holds or the timeout passes. cond returns
// whether it holds and, if not, what it saw, for the failure message.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyEvery(t, 250*time.Millisecond, timeout, what, cond)
}

// eventuallyEvery is eventually, looking every interval. It returns when
// the look that found cond true began: what it found was so by then (the
// bench times scenarios to it, so that a slow look is not counted).
func eventuallyEvery(t *testing.T, interval, timeout time.Duration, what string, cond func() (bool, string)) time.Time {
	t.Helper()
	last := ""
	var began time.Time
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(context.Context) (bool, error) {
		began = time.Now()
		ok, seen := cond()
		last = seen
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last seen: %s", what, timeout, last)
	}
	return began
}

// consistently checks, every 250 ms for the whole period, that cond still
// holds: an absence (nothing changed) has no event to wait for, so it is
// watched for a while instead, and a change that comes and goes is caught
// too.
func consistently(t *testing.T, period time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	seen := ""
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, period, true, func(context.Context) (bool, error) {
		ok, s := cond()
		if !ok {
			seen = s
			return false, errBroken
		}
		return false, nil
	})
	if errors.Is(err, errBroken) {
		t.Fatalf("%s: no longer so: %s", what, seen)
	}
}

// errBroken ends a consistently poll at the first look that fails.
var errBroken = errors.New("condition broken")

// clusterSpec builds a plain cluster of n members of the default version.
func newCluster(t *testing.T, ns, name string, n int32, mods ...func(*v1alpha2.EtcdCluster)) *v1alpha2.EtcdCluster {
	t.Helper()
	c := &v1alpha2.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha2.EtcdClusterSpec{Replicas: ptr.To(n), Version: etcdVersion},
	}
	for _, m := range mods {
		m(c)
	}
	if err := k.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// etcdVersion is the etcd release the suites run.
const etcdVersion = "3.6.16"

func getCluster(t *testing.T, ns, name string) *v1alpha2.EtcdCluster {
	t.Helper()
	c := &v1alpha2.EtcdCluster{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func members(t *testing.T, ns, cluster string) []v1alpha2.EtcdMember {
	t.Helper()
	list := &v1alpha2.EtcdMemberList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha2.EtcdMember) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return list.Items
}

// allowDeletion annotates a member so that the chart's admission guard lets
// the suites, which act as a cluster admin, delete it on purpose.
func allowDeletion(t *testing.T, m *v1alpha2.EtcdMember) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, manifest.AnnotationAllowDeletion)
	if err := k.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("annotating member %s for deletion: %v", m.Name, err)
	}
}

// waitReconciled waits until the cluster reached n ready members for its
// current spec, and etcd's membership is exactly those members, all voters.
func waitReconciled(t *testing.T, ns, name string, n int, timeout time.Duration) {
	t.Helper()
	waitReconciledEvery(t, 250*time.Millisecond, ns, name, n, timeout)
}

// waitReconciledEvery is waitReconciled looking every interval; it returns
// when the look that found the cluster reconciled began.
func waitReconciledEvery(t *testing.T, interval time.Duration, ns, name string, n int, timeout time.Duration) time.Time {
	t.Helper()
	return eventuallyEvery(t, interval, timeout, fmt.Sprintf("%s/%s reconciled with %d members", ns, name, n), func() (bool, string) {
		c := getCluster(t, ns, name)
		p := conditions.Get(c.Status.Conditions, conditions.Progressing)
		a := conditions.Get(c.Status.Conditions, conditions.Available)
		seen := fmt.Sprintf("ready=%d progressing=%v available=%v", c.Status.ReadyMembers, condString(p), condString(a))
		want := conditions.ReasonReconciled
		if n == 0 {
			want = conditions.ReasonPaused
		}
		if p == nil || p.Reason != want || p.ObservedGeneration != c.Generation || int(c.Status.ReadyMembers) != n {
			return false, seen
		}
		if n > 0 && (a == nil || a.Status != metav1.ConditionTrue) {
			return false, seen
		}
		if n == 0 {
			return true, ""
		}
		if err := etcdMatchesMembers(t, ns, name); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func condString(c *metav1.Condition) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
}

// etcdMatchesMembers checks that etcd lists exactly the running members, all
// voters: no stray member, no member missing.
func etcdMatchesMembers(t *testing.T, ns, name string) error {
	t.Helper()
	list, err := etcdMemberList(ns, name)
	if err != nil {
		return err
	}
	var want []string
	for _, m := range members(t, ns, name) {
		if m.DeletionTimestamp == nil && !m.Spec.Dormant {
			want = append(want, manifest.PeerURL(&m))
		}
	}
	var got []string
	for _, m := range list {
		if m.IsLearner {
			return fmt.Errorf("etcd member %x is still a learner", m.ID)
		}
		got = append(got, m.PeerURLs...)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Errorf("etcd lists %v, the running members are %v", got, want)
	}
	return nil
}

// pods returns the cluster's Pods by name.
func pods(t *testing.T, ns, cluster string) map[string]corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifest.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out
}

func seedOf(t *testing.T, ns, cluster string) v1alpha2.EtcdMember {
	t.Helper()
	for _, m := range members(t, ns, cluster) {
		if m.Spec.Bootstrap {
			return m
		}
	}
	t.Fatalf("%s/%s has no seed member", ns, cluster)
	return v1alpha2.EtcdMember{}
}

func setReplicas(t *testing.T, ns, name string, n int32) {
	t.Helper()
	out, err := kubectl("-n", ns, "scale", "etcdcluster/"+name, fmt.Sprintf("--replicas=%d", n))
	if err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
}

func memberNames(ms []v1alpha2.EtcdMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func podIsReady(conds []corev1.PodCondition) bool {
	for _, c := range conds {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReplaced waits until member victim is gone and the cluster has n
// members again.
func waitReplaced(t *testing.T, ns, cluster, victim string, n int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "member "+victim+" replaced", func() (bool, string) {
		ms := members(t, ns, cluster)
		if slices.Contains(memberNames(ms), victim) {
			return false, victim + " still there"
		}
		return len(ms) == n, fmt.Sprint(memberNames(ms))
	})
}

// every calls fn at each interval, in the background, until stop is called.
func every(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fn()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// deleteCluster deletes an EtcdCluster on purpose: the break-glass
// annotation the chart's deletion guard asks for, then the delete.
func deleteCluster(ctx context.Context, c *v1alpha2.EtcdCluster) error {
	patch := client.MergeFrom(c.DeepCopy())
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, manifest.AnnotationAllowDeletion, "true")
	if err := k.Patch(ctx, c, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	return k.Delete(ctx, c)
}
