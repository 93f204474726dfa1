package kubectletcd

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	defragctrl "github.com/seed74754924/etcd-operator/internal/controller/defrag"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// defragRuns lists the EtcdDefrags the plugin created.
func defragRuns(t *testing.T, env *fakeEnv) []v1alpha2.EtcdDefrag {
	t.Helper()
	list := &v1alpha2.EtcdDefragList{}
	if err := env.api.List(context.Background(), list, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// onlyRun is the one EtcdDefrag the plugin created.
func onlyRun(t *testing.T, env *fakeEnv) v1alpha2.EtcdDefrag {
	t.Helper()
	runs := defragRuns(t, env)
	if len(runs) != 1 {
		t.Fatalf("want one EtcdDefrag, got %d", len(runs))
	}
	return runs[0]
}

func TestFakeAPIServerRefusesAnEtcdDefragWithoutNameOrGenerateName(t *testing.T) {
	env := threeMembers(t)
	run := &v1alpha2.EtcdDefrag{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: v1alpha2.EtcdDefragSpec{}}
	run.Spec.ClusterRef.Name = "c"
	if err := env.kube.Create(context.Background(), run); !apierrors.IsInvalid(err) {
		t.Errorf("created a nameless EtcdDefrag (%v): the API server refuses it, and so must the fake", err)
	}
}

func TestDefragCreatesAnEtcdDefragWithTheFlagsSpec(t *testing.T) {
	env := threeMembers(t)
	code, out, errOut := env.run("defrag", "-c", "c", "--wait=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	run := onlyRun(t, env)
	if !strings.HasPrefix(run.Name, "c-defrag-") || len(run.Name) <= len("c-defrag-") || run.GenerateName != "c-defrag-" {
		t.Errorf("name %q, generateName %q: want one generated from c-defrag-", run.Name, run.GenerateName)
	}
	if run.Spec.ClusterRef.Name != "c" || run.Spec.Rule != nil || run.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("spec %+v: want cluster c, the operator's default rule and no TTL", run.Spec)
	}
	if want := "Created etcddefrag " + run.Name + " for etcdcluster c.\nFollow it with: kubectl get etcddefrag " + run.Name + " -n ns -w\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if len(env.ports) != 0 {
		t.Errorf("the plugin forwarded %d ports: the operator, not the plugin, talks to etcd", len(env.ports))
	}
}

func TestDefragNamesTheEtcdDefragItCreatesAsKubectlDoes(t *testing.T) {
	env := threeMembers(t)
	code, out, errOut := env.run("defrag", "-c", "c", "--wait=false", "-o", "name")
	if run := onlyRun(t, env); code != 0 || out != "etcddefrag.etcd-operator.cozystack.io/"+run.Name+"\n" {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
}

func TestDefragPassesTheRuleAndTTLFlagsThrough(t *testing.T) {
	env := threeMembers(t)
	cases := []struct {
		args  []string
		check func(v1alpha2.EtcdDefragSpec) bool
	}{
		{[]string{"--all", "--ttl-after-finished", "1h"}, func(s v1alpha2.EtcdDefragSpec) bool {
			return s.Rule != nil && s.Rule.All && s.Rule.FreeSpaceAbove == nil && *s.TTLSecondsAfterFinished == 3600
		}},
		{[]string{"--free-space-above", "100Mi", "--quota-usage-above", "80%", "--min-reclaim", "64Mi"}, func(s v1alpha2.EtcdDefragSpec) bool {
			r := s.Rule
			return r != nil && !r.All && r.FreeSpaceAbove.Equal(resource.MustParse("100Mi")) && r.QuotaUsageAbove == "80%" && r.MinReclaim.Equal(resource.MustParse("64Mi"))
		}},
		{[]string{"--ttl-after-finished", "0s"}, func(s v1alpha2.EtcdDefragSpec) bool {
			return s.Rule == nil && s.TTLSecondsAfterFinished != nil && *s.TTLSecondsAfterFinished == 0
		}},
	}
	for i, c := range cases {
		name := "named-" + string(rune('a'+i))
		args := append([]string{"defrag", "-c", "c", "--wait=false", "--name", name, "-o", "json"}, c.args...)
		if stored := createdWith(t, env, name, args...); stored.Spec.ClusterRef.Name != "c" || !c.check(stored.Spec) {
			t.Errorf("%v: spec %+v", c.args, stored.Spec)
		}
	}
	if code, _, errOut := env.run("defrag", "-c", "c", "--wait=false", "--name", "named-a"); code != 1 || !strings.Contains(errOut, "choose another --name") {
		t.Errorf("a name taken: exit %d, %q", code, errOut)
	}
}

func TestDefragFlagMistakesCreateNothing(t *testing.T) {
	env := threeMembers(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--all", "--free-space-above", "1Mi"}, 2, "--all defragments every member and cannot be combined"},
		{[]string{"--min-reclaim", "1Mi"}, 2, "--min-reclaim only applies together with --quota-usage-above"},
		{[]string{"--quota-usage-above", "101%"}, 2, `--quota-usage-above "101%": give a share of the quota from 1% to 100%`},
		{[]string{"--free-space-above", "0"}, 2, `--free-space-above "0": give a size greater than zero`},
		{[]string{"--ttl-after-finished", "-1s"}, 2, "--ttl-after-finished -1s"},
		{[]string{"--force"}, 2, "--force applies only with --direct"},
		{[]string{"--timeout", "1m"}, 2, "--timeout applies only with --direct"},
		{[]string{"--direct", "--all"}, 2, "--all applies to the EtcdDefrag the operator runs"},
		{[]string{"-o", "xml"}, 2, `unknown output format "xml"`},
	}
	for _, c := range cases {
		code, _, errOut := env.run(append([]string{"defrag", "-c", "c"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if code, _, errOut := env.run("defrag", "-p", "c-a", "--name", "x"); code != 2 || !strings.Contains(errOut, "--name applies to the EtcdDefrag") {
		t.Errorf("-p with --name: exit %d, %q", code, errOut)
	}
	if code, _, errOut := env.run("defrag", "-c", "nope"); code != 1 || !strings.Contains(errOut, `etcdcluster "nope" not found in namespace "ns"`) {
		t.Errorf("no such cluster: exit %d, %q", code, errOut)
	}
	if code, _, errOut := env.run("defrag"); code != 2 || !strings.Contains(errOut, "-c/--cluster") {
		t.Errorf("no target: exit %d, %q", code, errOut)
	}
	if runs := defragRuns(t, env); len(runs) != 0 {
		t.Errorf("mistakes created %d EtcdDefrags", len(runs))
	}
}

// createdWith runs the plugin with args, which create the EtcdDefrag name
// and print it as JSON, and returns it as stored.
func createdWith(t *testing.T, env *fakeEnv, name string, args ...string) *v1alpha2.EtcdDefrag {
	t.Helper()
	code, out, errOut := env.run(args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	var printed v1alpha2.EtcdDefrag
	if err := json.Unmarshal([]byte(out), &printed); err != nil || printed.Name != name || printed.Kind != "EtcdDefrag" {
		t.Errorf("%v: -o json printed %q (%v): want the created EtcdDefrag", args, out, err)
	}
	stored := &v1alpha2.EtcdDefrag{}
	if err := env.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, stored); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return stored
}

// Steps of the simulated controller, in the controller's own terms.

func checked(status metav1.ConditionStatus, reason, message string) func(*v1alpha2.EtcdDefrag) {
	return func(d *v1alpha2.EtcdDefrag) {
		conditions.Set(&d.Status.Conditions, d.Generation, conditions.DefragChecked, status, reason, message, time.Now())
	}
}

func step(mods ...func(*v1alpha2.EtcdDefrag)) func(*v1alpha2.EtcdDefrag) {
	return func(d *v1alpha2.EtcdDefrag) {
		for _, m := range mods {
			m(d)
		}
	}
}

func phase(p v1alpha2.DefragPhase) func(*v1alpha2.EtcdDefrag) {
	return func(d *v1alpha2.EtcdDefrag) {
		d.Status.Phase = p
		now := metav1.Now()
		switch {
		case p == v1alpha2.DefragRunning && d.Status.StartedAt == nil:
			d.Status.StartedAt = &now
		case p == v1alpha2.DefragComplete || p == v1alpha2.DefragFailed:
			d.Status.CompletedAt = &now
		}
	}
}

// planned lists the members as the controller plans them: followers by
// name, the leader last, all Pending.
func planned(followers []string, leader string) func(*v1alpha2.EtcdDefrag) {
	return func(d *v1alpha2.EtcdDefrag) {
		for _, f := range followers {
			d.Status.Members = append(d.Status.Members, v1alpha2.DefragMemberStatus{Name: f, Role: v1alpha2.DefragRoleFollower, Outcome: v1alpha2.DefragOutcomePending})
		}
		d.Status.Members = append(d.Status.Members, v1alpha2.DefragMemberStatus{Name: leader, Role: v1alpha2.DefragRoleLeader, Outcome: v1alpha2.DefragOutcomePending})
	}
}

func member(name string, outcome v1alpha2.DefragOutcome, reason string, before, after int64) func(*v1alpha2.EtcdDefrag) {
	return func(d *v1alpha2.EtcdDefrag) {
		for i := range d.Status.Members {
			m := &d.Status.Members[i]
			if m.Name != name {
				continue
			}
			m.Outcome, m.Reason, m.DBSizeBefore, m.DBSizeAfter = outcome, reason, before, after
			if after > 0 {
				m.ReclaimedBytes = before - after
			}
			if outcome != v1alpha2.DefragOutcomePending {
				m.FinishedAt = &metav1.Time{Time: time.Now()}
			}
		}
		d.Status.Defragmented = 0
		for _, m := range d.Status.Members {
			if m.Outcome == v1alpha2.DefragOutcomeDefragmented {
				d.Status.Defragmented++
			}
		}
	}
}

func TestDefragFollowsTheRunAndShowsEachMemberAsItFinishes(t *testing.T) {
	env := threeMembers(t)
	env.onTerminal = true
	const mib = 1 << 20
	env.simulateDefragController(t,
		func(*v1alpha2.EtcdDefrag) {}, // the operator has not seen it yet
		step(phase(v1alpha2.DefragPending), checked(metav1.ConditionFalse, conditions.ReasonQueued, "Waiting for EtcdDefrag c-nightly to finish: one run per cluster at a time")),
		step(phase(v1alpha2.DefragRunning), planned([]string{"c-a", "c-b"}, "c-c"), member("c-a", v1alpha2.DefragOutcomePending, "Defragmenting", 300*mib, 0),
			checked(metav1.ConditionTrue, conditions.ReasonDefragRunning, "Defragmenting members: c-a (1 of 3)")),
		step(member("c-a", v1alpha2.DefragOutcomeDefragmented, "", 300*mib, 20*mib), member("c-b", v1alpha2.DefragOutcomeSkipped, defragctrl.ReasonBelowThreshold, 30*mib, 0),
			checked(metav1.ConditionTrue, conditions.ReasonDefragRunning, "Defragmenting members: c-c (3 of 3)")),
		step(checked(metav1.ConditionFalse, conditions.ReasonClusterNotHealthy, "Waiting: member c-b is 2000 entries behind the leader")),
		step(member("c-c", v1alpha2.DefragOutcomeDefragmented, "", 310*mib, 21*mib), phase(v1alpha2.DefragComplete),
			checked(metav1.ConditionTrue, conditions.ReasonDefragComplete, "2/3 members defragmented")),
	)
	code, out, errOut := env.run("defrag", "-c", "c", "--name", "c-manual")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%q", code, out, errOut)
	}
	// What the terminal shows, in order: each state once, each member once.
	want := []string{
		"Waiting for the operator to take up etcddefrag c-manual...",
		"etcddefrag c-manual: Waiting for EtcdDefrag c-nightly to finish: one run per cluster at a time",
		"etcddefrag c-manual: Defragmenting members: c-a (1 of 3)",
		"c-a (follower): Defragmented, 300 MiB -> 20 MiB, 280 MiB reclaimed\n",
		"c-b (follower): Skipped, 30 MiB (BelowThreshold)\n",
		"etcddefrag c-manual: Defragmenting members: c-c (3 of 3)",
		"etcddefrag c-manual: Waiting: member c-b is 2000 entries behind the leader",
		"c-c (leader): Defragmented, 310 MiB -> 21 MiB, 289 MiB reclaimed\n",
	}
	rest := errOut
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("stderr lacks %q after what came before; stderr:\n%q", w, errOut)
		}
		rest = rest[i+len(w):]
	}
	if strings.Count(errOut, "c-a (follower)") != 1 {
		t.Errorf("c-a's outcome shown %d times", strings.Count(errOut, "c-a (follower)"))
	}
	if !strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Errorf("the progress line was not erased before the result: %q", errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || strings.Join(fields(lines[0]), " ") != "MEMBER ROLE OUTCOME BEFORE AFTER RECLAIMED REASON" {
		t.Fatalf("stdout:\n%s", out)
	}
	if got := strings.Join(fields(lines[2]), " "); got != "c-b follower Skipped 30 MiB - - BelowThreshold" {
		t.Errorf("skipped row %q", got)
	}
	if got := strings.Join(fields(lines[3]), " "); got != "c-c leader Defragmented 310 MiB 21 MiB 289 MiB -" {
		t.Errorf("leader row %q", got)
	}
	if lines[4] != "etcddefrag c-manual: 2/3 members defragmented." {
		t.Errorf("summary %q", lines[4])
	}
	for _, m := range env.etcd.members {
		if m.defraggedAt != 0 || len(env.ports) != 0 {
			t.Errorf("the plugin reached etcd itself (%s defragmented, %d ports)", m.Name, len(env.ports))
		}
	}
}

// failedRun is a run that ends Failed: c-a's Defragment call failed, c-b
// was defragmented.
func failedRun() []func(*v1alpha2.EtcdDefrag) {
	return []func(*v1alpha2.EtcdDefrag){
		step(phase(v1alpha2.DefragRunning), planned([]string{"c-a"}, "c-b"), checked(metav1.ConditionTrue, conditions.ReasonDefragRunning, "Defragmenting members: c-a (1 of 2)")),
		step(member("c-a", v1alpha2.DefragOutcomeFailed, defragctrl.ReasonRPCError, 8<<20, 0), member("c-b", v1alpha2.DefragOutcomeDefragmented, "", 8<<20, 2<<20),
			phase(v1alpha2.DefragFailed), checked(metav1.ConditionFalse, conditions.ReasonMemberFailed, "1/2 members defragmented, 1 failed; create a new EtcdDefrag to retry")),
	}
}

func TestDefragThatFailsExitsNonZeroWithTheReason(t *testing.T) {
	env := threeMembers(t)
	env.simulateDefragController(t, failedRun()...)
	code, out, errOut := env.run("defrag", "-c", "c", "--name", "c-broken")
	if code != 1 || !strings.Contains(errOut, "Error: etcddefrag c-broken failed: MemberFailed: 1/2 members defragmented, 1 failed; create a new EtcdDefrag to retry") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if strings.Count(errOut, "\n") != 1 {
		t.Errorf("off a terminal stderr has the error only: %q", errOut)
	}
	if !strings.Contains(out, "RPCError") || strings.Contains(out, "members defragmented.") {
		t.Errorf("stdout wants every member's outcome and no success line:\n%s", out)
	}

	for _, format := range []string{"json", "yaml"} {
		env := threeMembers(t)
		env.simulateDefragController(t, failedRun()...)
		code, out, errOut := env.run("defrag", "-c", "c", "--name", "c-broken", "-o", format)
		var run v1alpha2.EtcdDefrag
		if err := yaml.Unmarshal([]byte(out), &run); err != nil {
			t.Fatalf("-o %s: %v\n%s", format, err, out)
		}
		if code != 1 || !strings.Contains(errOut, "MemberFailed") || run.Status.Phase != v1alpha2.DefragFailed || len(run.Status.Members) != 2 || run.APIVersion != v1alpha2.GroupVersion.String() {
			t.Errorf("-o %s: exit %d, stderr %q, printed %+v", format, code, errOut, run)
		}
	}
}

func TestDefragOfARunDeletedBeforeItEnds(t *testing.T) {
	env := threeMembers(t)
	env.simulateDefragController(t, func(d *v1alpha2.EtcdDefrag) {
		if err := env.api.Delete(context.Background(), d.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	})
	// The simulated controller's status write finds nothing to write to,
	// and the plugin's read nothing to read.
	code, _, errOut := env.run("defrag", "-c", "c", "--name", "c-gone")
	if code != 1 || !strings.Contains(errOut, "etcddefrag c-gone was deleted before it ended") {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

func TestDefragWithoutTheEtcdDefragKindSuggestsDirect(t *testing.T) {
	env := threeMembers(t)
	env.withoutDefragCRD()
	code, out, errOut := env.run("defrag", "-c", "c")
	if code != 1 || out != "" || !strings.Contains(errOut, "this API server has no EtcdDefrag kind") || !strings.Contains(errOut, "kubectl etcd defrag -c c --direct") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = env.run("defrag", "-c", "c", "--direct")
	if code != 0 || !strings.Contains(out, "leader") {
		t.Errorf("--direct: exit %d, %q %q", code, out, errOut)
	}
}

func TestDirectDefragOutputs(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.alarms = []etcd.Alarm{{MemberID: 0x10, Type: "NOSPACE"}} })
	code, out, errOut := env.run("defrag", "-c", "c", "--direct", "-o", "json")
	var results DefragResultList
	if err := json.Unmarshal([]byte(out), &results); code != 0 || err != nil || len(results.Items) != 3 || results.Items[2].Role != "leader" || results.Kind != "DefragResultList" {
		t.Fatalf("exit %d, %v, %q", code, err, out)
	}
	if !strings.Contains(errOut, "Disarmed NOSPACE of member c-a") {
		t.Errorf("with -o json the disarmed alarms go to stderr: %q", errOut)
	}
	code, out, _ = env.run("defrag", "-c", "c", "--direct", "-o", "wide")
	if code != 0 || header(out) != "MEMBER ROLE BEFORE AFTER TOOK ID" || !strings.Contains(out, "0000000000000010\n") {
		t.Errorf("-o wide: exit %d\n%s", code, out)
	}
}
