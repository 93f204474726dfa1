package kubectletcd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

func TestStatusOfAClusterShowsEveryMemberAndFailsOnAnUnreadableOne(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) {
		e.member("c-c").down = true
		e.alarms = []etcd.Alarm{{MemberID: 0x11, Type: "NOSPACE"}}
	})
	code, out, errOut := env.run("status", "-c", "c")
	if code != 1 || !strings.Contains(errOut, "1 of 3 members could not be read") {
		t.Fatalf("exit %d, stderr %q; want 1 and the count of unreadable members", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows, got:\n%s", out)
	}
	for _, want := range []string{"ID", "NAME", "ENDPOINT", "DB SIZE", "IN USE", "LEADER", "RAFT TERM", "RAFT INDEX", "APPLIED", "LEARNER", "ALARMS", "VERSION"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header lacks %s: %s", want, lines[0])
		}
	}
	a := fields(lines[1])
	if a[0] != etcd.FormatID(0x10) || a[1] != "c-a" || a[3] != "8.0" || a[7] != "(25%)" || a[8] != "true" {
		t.Errorf("leader row wrong: %q", lines[1])
	}
	if !strings.Contains(lines[2], "NOSPACE") || !strings.Contains(lines[3], "connection refused") {
		t.Errorf("alarm or unreachable member not shown:\n%s", out)
	}
}

func fields(s string) []string { return strings.Fields(s) }

func TestStatusShowsPodsEtcdDoesNotListWithoutFailing(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b")
	gone := memberPod("c", "c-old", func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		p.Finalizers = []string{"test"}
	})
	env := newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a"), memberPod("c", "c-b"), memberPod("c", "c-new"), gone)
	code, out, errOut := env.run("status", "-c", "c")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[3], "-") || !strings.HasSuffix(lines[3], "not in etcd's member list") {
		t.Errorf("exit %d, %q\n%s", code, errOut, out)
	}
}

func TestStatusOutputs(t *testing.T) {
	env := threeMembers(t)
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := env.run("status", "-c", "c", "-o", format)
		if code != 0 {
			t.Fatalf("-o %s: exit %d: %s", format, code, errOut)
		}
		var list MemberStatusList
		if err := yaml.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("-o %s is not parseable: %v\n%s", format, err, out)
		}
		rows := list.Items
		if list.APIVersion != "kubectl-etcd.cozystack.io/v1alpha1" || list.Kind != "MemberStatusList" {
			t.Errorf("-o %s: apiVersion %q, kind %q", format, list.APIVersion, list.Kind)
		}
		if len(rows) != 3 || !rows[0].IsLeader || rows[1].IsLeader || rows[0].DBSize != 8<<20 || rows[2].RaftAppliedIndex != 52 {
			t.Errorf("-o %s: %+v", format, rows)
		}
	}
}

func TestStatusOfOnePodShowsItsMemberOnly(t *testing.T) {
	env := threeMembers(t)
	code, out, errOut := env.run("status", "-p", "c-b", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var list MemberStatusList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	if rows := list.Items; len(rows) != 1 || rows[0].Name != "c-b" || rows[0].IsLeader || rows[0].Leader != etcd.FormatID(0x10) {
		t.Errorf("got %+v", list.Items)
	}
	if len(env.ports) != 1 {
		t.Errorf("a Pod's status forwarded %d ports, want only its own", len(env.ports))
	}
}

func TestTargetErrors(t *testing.T) {
	env := threeMembers(t)
	env.refuse["c-a"] = true
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status"}, 2, "-p/--pod or the EtcdCluster with -c/--cluster"},
		{[]string{"status", "-p", "c-a", "-c", "c"}, 2, "exclude each other"},
		{[]string{"status", "-c", "nope"}, 1, `etcdcluster "nope" not found in namespace "ns"`},
		{[]string{"status", "-p", "nope"}, 1, `pod "nope" not found in namespace "ns"`},
		{[]string{"members", "-p", "c-a"}, 1, "port-forward refused"},
		{[]string{"status", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"remove-member"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"add-member", "-c", "c", "not-a-url"}, 2, "is not a peer URL"},
		{[]string{"leave", "-c", "c"}, 2, "leave removes the member of the Pod given with -p"},
	}
	for _, c := range cases {
		code, _, errOut := env.run(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

func TestPodNotReadyIsSaidAndAnotherMemberAnswersForTheCluster(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b", "c-c")
	env := newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a", notReadyPod), memberPod("c", "c-b"), memberPod("c", "c-c"))
	code, _, errOut := env.run("members", "-p", "c-a")
	if code != 1 || !strings.Contains(errOut, "pod c-a is not Ready, and its etcd does not run: container etcd is waiting (CrashLoopBackOff, 4 restarts)") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	code, out, errOut := env.run("members", "-c", "c")
	if code != 0 || strings.Count(out, "http://c-") != 6 {
		t.Errorf("members -c with one Pod not Ready: exit %d, %s%s", code, out, errOut)
	}
}

func TestAPodThatRunsButIsNotReadyIsStillAsked(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b", "c-c")
	e.alarms = []etcd.Alarm{{MemberID: 0x10, Type: "NOSPACE"}}
	env := newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a", unhealthyPod), memberPod("c", "c-b", unhealthyPod), memberPod("c", "c-c", unhealthyPod))
	if code, out, errOut := env.run("alarm", "list", "-p", "c-a"); code != 0 || !strings.Contains(out, "NOSPACE") {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
}

func TestMembers(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.members[2].IsLearner = true })
	code, out, _ := env.run("members", "-c", "c")
	if code != 0 {
		t.Fatal(code)
	}
	want := []string{"ID", "NAME", "PEER URLS", "CLIENT URLS", "LEARNER"}
	if h := strings.Split(out, "\n")[0]; strings.Join(strings.Fields(strings.ReplaceAll(h, " URLS", "_URLS")), " ") != "ID NAME PEER_URLS CLIENT_URLS LEARNER" {
		t.Errorf("header %q, want %v", h, want)
	}
	if !strings.HasSuffix(strings.Split(strings.TrimSpace(out), "\n")[3], "true") {
		t.Errorf("learner not marked:\n%s", out)
	}
}

func TestDefragOfAClusterGoesFollowersFirstLeaderLastAndDisarmsNoSpace(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b", "c-c", "c-d")
	// c-b leads; c-d is a learner.
	for _, m := range e.members {
		m.leader = 0x11
	}
	e.member("c-d").IsLearner = true
	e.alarms = []etcd.Alarm{{MemberID: 0x10, Type: "NOSPACE"}, {MemberID: 0x12, Type: "CORRUPT"}}
	env := newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a"), memberPod("c", "c-b"), memberPod("c", "c-c"), memberPod("c", "c-d"))
	code, out, errOut := env.run("defrag", "-c", "c", "--direct")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	order := map[string]int{}
	for _, m := range env.etcd.members {
		order[m.Name] = m.defraggedAt
		if m.dbSize != m.inUse {
			t.Errorf("%s not defragmented", m.Name)
		}
	}
	if order["c-d"] != 1 || order["c-a"] != 2 || order["c-c"] != 3 || order["c-b"] != 4 {
		t.Errorf("defrag order %v: want the learner, then the followers, then the leader", order)
	}
	if len(env.etcd.alarms) != 1 || env.etcd.alarms[0].Type != "CORRUPT" {
		t.Errorf("alarms left %v: want NOSPACE disarmed and CORRUPT kept", env.etcd.alarms)
	}
	if !strings.Contains(out, "Disarmed NOSPACE of member c-a") || !strings.Contains(out, "8.0 MiB   2.0 MiB") {
		t.Errorf("output:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("progress written off a terminal: %q", errOut)
	}
}

func TestDefragRefusesWhatCostsQuorum(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.member("c-a").down = true })
	code, _, errOut := env.run("defrag", "-p", "c-b")
	if code != 1 || !strings.Contains(errOut, "refusing to defragment c-b") || !strings.Contains(errOut, "1 of 3 voters would stay healthy") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	// The leader is down: its followers go first and are refused.
	code, _, errOut = env.run("defrag", "-c", "c", "--direct")
	if code != 1 || !strings.Contains(errOut, "refusing to defragment c-b") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	for _, m := range env.etcd.members {
		if m.defraggedAt != 0 {
			t.Errorf("%s was defragmented", m.Name)
		}
	}
	if code, _, errOut = env.run("defrag", "-p", "c-b", "--force"); code != 0 || env.etcd.member("c-b").defraggedAt != 1 {
		t.Errorf("--force: exit %d, %q", code, errOut)
	}
}

func TestCompact(t *testing.T) {
	env := threeMembers(t)
	if code, out, _ := env.run("compact", "-c", "c"); code != 0 || out != "Compacted to revision 100.\n" {
		t.Errorf("exit %d, %q", code, out)
	}
	if code, out, _ := env.run("compact", "-p", "c-b"); code != 0 || out != "Already compacted at revision 100.\n" {
		t.Errorf("again: exit %d, %q", code, out)
	}
}

func TestAlarms(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.alarms = []etcd.Alarm{{MemberID: 0x12, Type: "NOSPACE"}} })
	code, out, _ := env.run("alarm", "list", "-c", "c", "-o", "json")
	var alarms AlarmList
	if err := json.Unmarshal([]byte(out), &alarms); code != 0 || err != nil || len(alarms.Items) != 1 || alarms.Items[0].Name != "c-c" || alarms.Items[0].Alarm != "NOSPACE" {
		t.Errorf("exit %d, %v, %+v", code, err, alarms)
	}
	if code, out, _ = env.run("alarm", "list", "-c", "c", "-o", "name"); code != 0 || out != "member.kubectl-etcd.cozystack.io/c-c\n" {
		t.Errorf("-o name: exit %d, %q", code, out)
	}
	if code, out, _ = env.run("alarm", "disarm", "-p", "c-a"); code != 0 || !strings.Contains(out, "Disarmed NOSPACE of member c-c (0000000000000012)") {
		t.Errorf("disarm: exit %d, %q", code, out)
	}
	if code, out, _ = env.run("alarm", "list", "-c", "c"); code != 0 || out != "No alarm is raised.\n" {
		t.Errorf("after disarm: exit %d, %q", code, out)
	}
}

func TestForfeitLeadershipPicksTheHealthyVoterFurthestAhead(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) {
		e.members = append(e.members, &fakeMember{Member: etcd.Member{ID: 0x13, Name: "c-d", IsLearner: true}, leader: 0x10, applied: 99})
		e.member("c-b").applied = 70 // ahead of c-c (52), behind the learner
	})
	if code, out, _ := env.run("forfeit-leadership", "-p", "c-b"); code != 0 || out != "c-b is not the leader (c-a is): nothing to do.\n" {
		t.Errorf("non-leader Pod: exit %d, %q", code, out)
	}
	code, out, errOut := env.run("forfeit-leadership", "-c", "c")
	if code != 0 || out != "Leadership moved from c-a to c-b.\n" || env.etcd.member("c-c").leader != 0x11 {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = env.run("forfeit-leadership", "-c", "c", "--to", "c-d")
	if code != 1 || !strings.Contains(errOut, "c-d cannot take the leadership: it is a learner") {
		t.Errorf("--to a learner: exit %d, %q", code, errOut)
	}
	if code, out, _ = env.run("forfeit-leadership", "-p", "c-b", "--to", "0000000000000010"); code != 0 || out != "Leadership moved from c-b to c-a.\n" {
		t.Errorf("--to by ID: exit %d, %q", code, out)
	}
}

func TestMembershipChangesFollowTheQuorumProjection(t *testing.T) {
	e := newFakeEtcd("solo")
	env := newFakeEnv(t, e, memberPod("x", "solo"))
	// One voter: a learner may join, an unstarted voter may not.
	code, out, errOut := env.run("add-member", "-p", "solo", "http://new.x.ns.svc:2380", "--name", "new")
	if code != 0 || !strings.Contains(out, "as a learner") || !strings.Contains(out, "--initial-cluster=new=http://new.x.ns.svc:2380,solo=http://solo.c.ns.svc:2380 --initial-cluster-state=existing") {
		t.Fatalf("add learner: exit %d, %q %q", code, out, errOut)
	}
	if !e.members[1].IsLearner {
		t.Error("added a voter")
	}
	code, _, errOut = env.run("add-member", "-p", "solo", "--voter", "http://other.x.ns.svc:2380")
	if code != 1 || !strings.Contains(errOut, "refusing: cannot promote http://other.x.ns.svc:2380: 1 of 2 voters would be healthy, 2 needed") {
		t.Errorf("add voter: exit %d, %q", code, errOut)
	}
	learner := etcd.FormatID(e.members[1].ID)
	if code, _, errOut = env.run("promote-member", "-p", "solo", learner); code != 1 || !strings.Contains(errOut, "refusing: cannot promote") {
		t.Errorf("promote a learner that has not started: exit %d, %q", code, errOut)
	}
	if code, out, _ = env.run("remove-member", "-p", "solo", learner); code != 0 || !strings.Contains(out, "Removed member "+learner) {
		t.Errorf("remove learner: exit %d, %q", code, out)
	}
	if code, _, errOut = env.run("leave", "-p", "solo"); code != 1 || !strings.Contains(errOut, "it is the last voter") {
		t.Errorf("leave the last voter: exit %d, %q", code, errOut)
	}
	if code, _, errOut = env.run("add-member", "-p", "solo", "--voter", "--force", "http://other.x.ns.svc:2380"); code != 0 || e.members[1].IsLearner {
		t.Errorf("--force: exit %d, %q", code, errOut)
	}
}

func TestLeaveAndRemoveOnAnOperatorCluster(t *testing.T) {
	// etcd refuses the first two tries; the member that leaves is not the
	// one asked to remove it (it would stop before answering).
	env := threeMembers(t, func(e *fakeEtcd) { e.unhealthyFor = 2 })
	code, out, errOut := env.run("leave", "-p", "c-c")
	if code != 0 || !strings.Contains(out, "Removed member c-c (0000000000000012) from cluster 00000000000000c1") || !strings.Contains(errOut, "run by etcd-operator") {
		t.Fatalf("exit %d, %q %q", code, out, errOut)
	}
	if len(env.etcd.members) != 2 || env.etcd.unhealthyFor != 0 {
		t.Fatalf("members %d, refusals left %d", len(env.etcd.members), env.etcd.unhealthyFor)
	}
	env.etcd.member("c-b").down = true
	code, _, errOut = env.run("remove-member", "-c", "c", "c-a")
	if code != 1 || !strings.Contains(errOut, "refusing: cannot remove c-a") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	if code, _, errOut = env.run("remove-member", "-c", "c", "nobody"); code != 1 || !strings.Contains(errOut, "etcd lists no member nobody") {
		t.Errorf("exit %d, %q", code, errOut)
	}
}

func TestSnapshotWritesAVerifiedFileOrNothing(t *testing.T) {
	env := threeMembers(t)
	path := filepath.Join(t.TempDir(), "s.db")
	code, out, errOut := env.run("snapshot", "-c", "c", path)
	if code != 0 || !strings.Contains(out, "Saved a snapshot of member c-a to "+path) || !strings.Contains(out, "checksum verified") {
		t.Fatalf("exit %d, %q %q", code, out, errOut)
	}
	got, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(got), string(env.etcd.snapshot)) || len(got) != len(env.etcd.snapshot)+32 {
		t.Errorf("file %q, %v", got, err)
	}
	env.etcd.corrupt = true
	bad := filepath.Join(filepath.Dir(path), "bad.db")
	code, _, errOut = env.run("snapshot", "-p", "c-b", bad)
	if code != 1 || !strings.Contains(errOut, "checksum") {
		t.Errorf("corrupt stream: exit %d, %q", code, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "bad*")); len(left) != 0 {
		t.Errorf("a corrupt snapshot left %v", left)
	}
}

func TestVersion(t *testing.T) {
	env := threeMembers(t)
	if code, out, _ := env.run("version"); code != 0 || !strings.HasPrefix(out, "kubectl-etcd v1.2.3-test (go") {
		t.Errorf("exit %d, %q", code, out)
	}
	if code, out, _ := env.run("--version"); code != 0 || !strings.Contains(out, "v1.2.3-test") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	var v VersionInfo
	if code, out, _ := env.run("version", "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Version != "v1.2.3-test" || v.Kind != "VersionInfo" {
		t.Errorf("-o json: exit %d, %q", code, out)
	}
	// A version names nothing: -o name is not offered.
	if code, _, errOut := env.run("version", "-o", "name"); code != 2 || !strings.Contains(errOut, `unknown output format "name"`) {
		t.Errorf("-o name: exit %d, %q", code, errOut)
	}
}

func TestCompletionScripts(t *testing.T) {
	env := threeMembers(t)
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, out, _ := env.run("completion", shell); code != 0 || len(out) < 100 {
			t.Errorf("%s: exit %d, %d bytes", shell, code, len(out))
		}
	}
	code, out, _ := env.run("__complete", "status", "-c", "")
	if code != 0 || !strings.HasPrefix(out, "c\n") {
		t.Errorf("completing -c: exit %d, %q", code, out)
	}
}

func TestEveryLeafCommandReturnsErrors(t *testing.T) {
	a := &app{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.HasSubCommands() && c.Run != nil {
			t.Errorf("%s uses Run: its errors would not set the exit code", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCommand())
}
