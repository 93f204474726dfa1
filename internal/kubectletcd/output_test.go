package kubectletcd

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"hash"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestSizes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 20 << 10: "20 KiB", 8 << 20: "8.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct {
		part, whole int64
		want        string
	}{{0, 0, "-"}, {5, 0, "-"}, {1, 4, "25%"}, {4, 4, "100%"}} {
		if got := percent(c.part, c.whole); got != c.want {
			t.Errorf("percent(%d, %d) = %q, want %q", c.part, c.whole, got, c.want)
		}
	}
}

func TestStatusRowOfAFreshMemberHasNoNaN(t *testing.T) {
	var out bytes.Buffer
	if err := statusTable([]StatusRow{{ID: "1", Name: "m"}})(false).write(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "NaN") || !strings.Contains(out.String(), "0 B (-)") {
		t.Errorf("%s", out.String())
	}
}

func TestProgressOnlyOnATerminal(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var w bytes.Buffer
		a := &app{terminal: func(io.Writer) bool { return tty }}
		p := a.progressTo(&w)
		p.show("step %d", 1)
		p.tick("bytes %d", 10)
		p.clear()
		switch {
		case !tty && w.Len() != 0:
			t.Errorf("off a terminal: %q", w.String())
		case tty && w.String() != "\r\x1b[Kstep 1\r\x1b[K":
			// The tick right after a show is dropped; clear erases the line.
			t.Errorf("on a terminal: %q", w.String())
		}
	}
}

func TestTrailingChecksum(t *testing.T) {
	env := threeMembers(t)
	rc, _ := (&fakeClient{e: env.etcd, pod: "c-a"}).Snapshot(t.Context())
	whole, _ := io.ReadAll(rc)
	for _, chunk := range []int{1, 7, 32, 33, len(whole)} {
		sum := &trailingChecksum{h: newSHA()}
		for i := 0; i < len(whole); i += chunk {
			_, _ = sum.Write(whole[i:min(i+chunk, len(whole))])
		}
		if !sum.ok() {
			t.Errorf("chunks of %d: checksum not recognised", chunk)
		}
	}
	sum := &trailingChecksum{h: newSHA()}
	_, _ = sum.Write(whole[:len(whole)-1])
	if sum.ok() {
		t.Error("a truncated stream passed")
	}
}

func newSHA() hash.Hash { return sha256.New() }

func onNode(node string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeName = node }
}

// Every format -o offers, on `status` of a cluster of three.
func TestStatusPrinters(t *testing.T) {
	e := newFakeEtcd("c-a", "c-b", "c-c")
	env := newFakeEnv(t, e, cluster("c"), memberPod("c", "c-a", onNode("n1")), memberPod("c", "c-b", onNode("n2")), memberPod("c", "c-c", onNode("n3")))
	narrow := "ID NAME ENDPOINT DB SIZE IN USE LEADER RAFT TERM RAFT INDEX APPLIED LEARNER ALARMS VERSION ERRORS"
	cases := []struct {
		flags []string
		check func(out string) bool
	}{
		{nil, func(out string) bool { return header(out) == narrow && !strings.Contains(out, "n1") }},
		{[]string{"-o", "table"}, func(out string) bool { return header(out) == narrow }},
		{[]string{"-o", "wide"}, func(out string) bool {
			rows := strings.Split(strings.TrimSpace(out), "\n")
			return header(out) == narrow+" PEER URLS LEADER ID POD NODE" && len(rows) == 4 &&
				strings.HasSuffix(rows[2], "http://c-b.c.ns.svc:2380   0000000000000010   c-b   n2")
		}},
		{[]string{"-o", "json"}, func(out string) bool {
			var l MemberStatusList
			return json.Unmarshal([]byte(out), &l) == nil && l.Kind == "MemberStatusList" && len(l.Items) == 3 && l.Items[1].Node == "n2"
		}},
		{[]string{"-o", "yaml"}, func(out string) bool {
			return strings.HasPrefix(out, "apiVersion: kubectl-etcd.cozystack.io/v1alpha1\nitems:\n") && strings.HasSuffix(out, "kind: MemberStatusList\n")
		}},
		{[]string{"-o", "name"}, func(out string) bool {
			return out == "member.kubectl-etcd.cozystack.io/c-a\nmember.kubectl-etcd.cozystack.io/c-b\nmember.kubectl-etcd.cozystack.io/c-c\n"
		}},
		{[]string{"-o", "jsonpath={.items[?(@.isLeader==true)].name}"}, func(out string) bool { return out == "c-a" }},
		{[]string{"-o", "jsonpath-file=" + writeFile(t, "path", "{range .items[*]}{.name}={.raftAppliedIndex} {end}")}, func(out string) bool {
			return out == "c-a=50 c-b=51 c-c=52 "
		}},
		{[]string{"-o", "go-template={{range .items}}{{.pod}}@{{.node}} {{end}}"}, func(out string) bool { return out == "c-a@n1 c-b@n2 c-c@n3 " }},
		{[]string{"--template", "{{len .items}}"}, func(out string) bool { return out == "3" }},
		// Numbers stay integers through the template printers.
		{[]string{"-o", "jsonpath={.items[0].dbSize}"}, func(out string) bool { return out == "8388608" }},
		{[]string{"-o", "go-template={{(index .items 0).dbSize}}"}, func(out string) bool { return out == "8388608" }},
	}
	for _, c := range cases {
		code, out, errOut := env.run(append([]string{"status", "-c", "c"}, c.flags...)...)
		if code != 0 || !c.check(out) {
			t.Errorf("%v: exit %d, %q\n%s", c.flags, code, errOut, out)
		}
	}
}

// header is the first line of a table, its columns one space apart.
func header(table string) string {
	line, _, _ := strings.Cut(table, "\n")
	return strings.Join(strings.Fields(line), " ")
}

func TestMembersWideAsksEveryMemberForItsStatus(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.member("c-c").down = true })
	code, out, errOut := env.run("members", "-c", "c")
	if code != 0 || header(out) != "ID NAME PEER URLS CLIENT URLS LEARNER" || len(env.ports) != 1 {
		t.Fatalf("exit %d, %q, %d ports\n%s", code, errOut, len(env.ports), out)
	}
	code, out, errOut = env.run("members", "-c", "c", "-o", "wide")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || header(out) != "ID NAME PEER URLS CLIENT URLS LEARNER LEADER VERSION DB SIZE RAFT TERM RAFT INDEX" || len(rows) != 4 {
		t.Fatalf("exit %d, %q\n%s", code, errOut, out)
	}
	if a := fields(rows[1]); !slices.Equal(a[4:], []string{"false", "true", "3.6.16", "8.0", "MiB", "2", "51"}) {
		t.Errorf("the leader's row: %q", rows[1])
	}
	if !strings.HasSuffix(rows[3], "false     -        -         -         -           -") {
		t.Errorf("a member that does not answer: %q", rows[3])
	}
	code, out, _ = env.run("members", "-c", "c", "-o", "name")
	if code != 0 || out != "member.kubectl-etcd.cozystack.io/c-a\nmember.kubectl-etcd.cozystack.io/c-b\nmember.kubectl-etcd.cozystack.io/c-c\n" {
		t.Errorf("-o name: exit %d, %q", code, out)
	}
}

func TestAMemberWithoutANameIsNamedByItsID(t *testing.T) {
	env := threeMembers(t, func(e *fakeEtcd) { e.members[2].Name = "" })
	if code, out, _ := env.run("members", "-c", "c", "-o", "name"); code != 0 || !strings.HasSuffix(out, "\nmember.kubectl-etcd.cozystack.io/0000000000000012\n") {
		t.Errorf("exit %d, %q", code, out)
	}
}

func TestUnknownOutputFormatsAreRefusedBeforeAnythingIsDone(t *testing.T) {
	env := threeMembers(t)
	for _, args := range [][]string{
		{"status", "-c", "c", "-o", "xml"},
		{"members", "-c", "c", "-o", "xml"},
		{"alarm", "list", "-c", "c", "-o", "xml"},
		{"defrag", "-c", "c", "--direct", "-o", "xml"},
		{"recover", "-c", "c", "--dry-run", "-o", "xml"},
		{"version", "-o", "xml"},
	} {
		code, out, errOut := env.run(args...)
		if code != 2 || out != "" || !strings.Contains(errOut, `unknown output format "xml": use one of wide, json, yaml, kyaml`) || !strings.Contains(errOut, "jsonpath") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	if len(env.ports) != 0 {
		t.Errorf("a refused format reached members: %d ports forwarded", len(env.ports))
	}
	if code, _, errOut := env.run("status", "-c", "c", "-o", "jsonpath={.items["); code != 2 || !strings.Contains(errOut, "unterminated array") {
		t.Errorf("a jsonpath that does not parse: exit %d, %q", code, errOut)
	}
}

func TestResultsDeepCopy(t *testing.T) {
	status := newMemberStatusList([]StatusRow{{Name: "a", PeerURLs: []string{"p"}, Alarms: []string{"NOSPACE"}, Errors: []string{"e"}}})
	members := &MemberList{Items: []MemberRow{{Name: "a", PeerURLs: []string{"p"}, ClientURLs: []string{"c"}}}}
	alarms := &AlarmList{Items: []AlarmRow{{Name: "a", Alarm: "NOSPACE"}}}
	defrags := &DefragResultList{Items: []DefragResult{{Name: "a"}}}
	recovery := newRecovery(&v1alpha2.RecoveryStatus{Phase: "Planned", Discarded: []v1alpha2.RecoveryMember{{Name: "a"}}})
	version := &VersionInfo{Version: "v1"}
	for _, obj := range []runtime.Object{status, members, alarms, defrags, recovery, version} {
		if c := obj.DeepCopyObject(); !reflect.DeepEqual(c, obj) {
			t.Errorf("%T: copy %+v differs", obj, c)
		}
	}
	sc, mc, ac := status.DeepCopyObject().(*MemberStatusList), members.DeepCopyObject().(*MemberList), alarms.DeepCopyObject().(*AlarmList)
	dc, rc := defrags.DeepCopyObject().(*DefragResultList), recovery.DeepCopyObject().(*Recovery)
	sc.Items[0].PeerURLs[0], sc.Items[0].Alarms[0], sc.Items[0].Errors[0] = "x", "x", "x"
	mc.Items[0].PeerURLs[0], mc.Items[0].ClientURLs[0] = "x", "x"
	ac.Items[0].Name, dc.Items[0].Name, rc.Discarded[0].Name = "x", "x", "x"
	r := status.Items[0]
	if r.PeerURLs[0] != "p" || r.Alarms[0] != "NOSPACE" || r.Errors[0] != "e" || members.Items[0].PeerURLs[0] != "p" || members.Items[0].ClientURLs[0] != "c" ||
		alarms.Items[0].Name != "a" || defrags.Items[0].Name != "a" || recovery.Discarded[0].Name != "a" {
		t.Error("a copy shares memory with its original")
	}
}
