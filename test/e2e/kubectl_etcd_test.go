package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/kubectletcd"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// The kubectl-etcd suite runs the plugin as a user does, `kubectl etcd ...`
// with the binary on PATH and a kubeconfig, so every member is reached
// through the API server's port-forward.
const kubectlNS = "e2e-kubectl"

func TestKubectlEtcd(t *testing.T) {
	t.Parallel()
	namespace(t, kubectlNS)
	t.Run("plaintext", func(t *testing.T) { t.Parallel(); testPluginPlaintext(t) })
	t.Run("mtls-auth", func(t *testing.T) { t.Parallel(); testPluginMTLSAuth(t) })
	t.Run("foreign-pod", func(t *testing.T) { t.Parallel(); testPluginForeignPod(t) })
}

// testPluginPlaintext runs every command against a plain 3-member cluster.
func testPluginPlaintext(t *testing.T) {
	const name = "plain"
	newCluster(t, kubectlNS, name, 3)
	waitReconciled(t, kubectlNS, name, 3, 3*time.Minute)

	rows := pluginStatus(t, name)
	leader := requireOneLeader(t, rows, 3)
	var single kubectletcd.MemberStatusList
	pluginDecode(t, &single, "status", "-p", rows[0].Name, "-o", "yaml")
	if len(single.Items) != 1 || single.Items[0].Name != rows[0].Name {
		t.Errorf("status -p %s: %+v", rows[0].Name, single)
	}
	if table := mustPlugin(t, "status", "-c", name); strings.Count(table, "\n") != 4 || !strings.Contains(table, "RAFT TERM") {
		t.Errorf("status table:\n%s", table)
	}
	var ms kubectletcd.MemberList
	pluginDecode(t, &ms, "members", "-c", name, "-o", "json")
	var listed []string
	for _, m := range ms.Items {
		listed = append(listed, m.Name)
	}
	slices.Sort(listed)
	if want := memberNames(members(t, kubectlNS, name)); !slices.Equal(listed, sorted(want)) {
		t.Errorf("members lists %v, the EtcdMembers are %v", listed, want)
	}

	defragReclaimsUnderWrites(t, name)
	progressOnlyOnATerminal(t, name)

	if out := mustPlugin(t, "alarm", "list", "-c", name); out != "No alarm is raised.\n" {
		t.Errorf("alarm list: %q", out)
	}
	if out := mustPlugin(t, "alarm", "disarm", "-c", name); out != "No alarm to disarm.\n" {
		t.Errorf("alarm disarm: %q", out)
	}
	forfeitLeadership(t, name, leader)
	snapshotPassesEtcdutl(t, name)

	// A learner added behind the operator's back; the operator removes
	// such a member when it next looks, so either of the two may.
	out, errOut := mustPluginBoth(t, "add-member", "-c", name, "http://stray."+name+"."+kubectlNS+".svc:2380")
	if !strings.Contains(out, "as a learner") || !strings.Contains(errOut, "run by etcd-operator") {
		t.Errorf("add-member: %q %q", out, errOut)
	}
	stray := strings.Fields(out)[2]
	out, errOut, code := runPlugin(t, "remove-member", "-c", name, stray)
	switch {
	case code == 0 && strings.Contains(out, "Removed member "+stray):
	case code == 1 && strings.Contains(errOut, "etcd lists no member "+stray):
		t.Logf("the operator removed learner %s first", stray)
	default:
		t.Errorf("remove-member %s: exit %d, %q %q", stray, code, out, errOut)
	}
	waitReconciled(t, kubectlNS, name, 3, time.Minute)

	// A member that leaves, or is removed, is replaced by the operator.
	victim := followerOf(t, name)
	if out := mustPlugin(t, "leave", "-p", victim); !strings.Contains(out, "Removed member "+victim) {
		t.Errorf("leave: %q", out)
	}
	waitReplaced(t, kubectlNS, name, victim, 3, 3*time.Minute)
	waitReconciled(t, kubectlNS, name, 3, 3*time.Minute)
	victim = followerOf(t, name)
	if out := mustPlugin(t, "remove-member", "-c", name, victim); !strings.Contains(out, "Removed member "+victim) {
		t.Errorf("remove-member: %q", out)
	}
	waitReplaced(t, kubectlNS, name, victim, 3, 3*time.Minute)
	waitReconciled(t, kubectlNS, name, 3, 3*time.Minute)

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "-c", "nope"}, 1, `etcdcluster "nope" not found in namespace "` + kubectlNS + `"`},
		{[]string{"status"}, 2, "name the etcd Pod with -p/--pod or the EtcdCluster with -c/--cluster"},
		{[]string{"members", "-p", "nope"}, 1, `pod "nope" not found`},
		{[]string{"status", "-c", name, "-o", "xml"}, 2, `unknown output format "xml"`},
	} {
		_, errOut, code := runPlugin(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("kubectl etcd %s: exit %d, %q; want exit %d and %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
}

// defragReclaimsUnderWrites deletes a large share of the keyspace, compacts
// and defragments the whole cluster while a client writes, and checks the
// space came back, the leader went last and no acknowledged write was lost.
func defragReclaimsUnderWrites(t *testing.T, name string) {
	c, err := clusterClient(kubectlNS, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	fill(t, c, "bulk/", 24<<20)
	before := pluginStatus(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Delete(ctx, "bulk/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w := startWriter(t, kubectlNS, name)
	w.requireWritesAfter("", 5, time.Minute)
	if out := mustPlugin(t, "compact", "-c", name); !strings.HasPrefix(out, "Compacted to revision ") {
		t.Errorf("compact: %q", out)
	}
	w.mark("defrag")
	out, errOut, code := runPlugin(t, "defrag", "-c", name, "--direct")
	w.mark("defragged")
	if code != 0 || errOut != "" {
		t.Fatalf("defrag -c: exit %d, stderr %q (piped: no progress expected)\n%s", code, errOut, out)
	}
	t.Logf("kubectl etcd defrag -c %s:\n%s", name, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Fields(lines[3])[1] != "leader" {
		t.Errorf("want 3 members defragmented, the leader last:\n%s", out)
	}
	after := pluginStatus(t, name)
	for _, b := range before {
		i := slices.IndexFunc(after, func(a kubectletcd.StatusRow) bool { return a.ID == b.ID })
		if i < 0 || after[i].DBSize*2 > b.DBSize {
			t.Errorf("member %s: DB size %d before, %+v after: want less than half", b.Name, b.DBSize, after)
		}
	}
	w.requireWritesBetween("defrag", "defragged", 1)
	w.verify("defragged")
	t.Logf("longest write stall during the defragmentation: %s", w.longestStall("defrag", "defragged").Round(time.Millisecond))
}

// progressOnlyOnATerminal: defrag and snapshot show progress on a terminal
// stderr, and (above) nothing when piped.
func progressOnlyOnATerminal(t *testing.T, name string) {
	out, tty := runPluginOnTerminal(t, "defrag", "-c", name, "--direct")
	if !strings.Contains(tty, "Defragmenting ") || !strings.Contains(out, "leader") {
		t.Errorf("defrag on a terminal: stderr %q, stdout %q", tty, out)
	}
	path := filepath.Join(t.TempDir(), "tty.db")
	out, tty = runPluginOnTerminal(t, "snapshot", "-c", name, path)
	if !strings.Contains(tty, "Saving a snapshot of ") || !strings.Contains(out, "checksum verified") {
		t.Errorf("snapshot on a terminal: stderr %q, stdout %q", tty, out)
	}
	_, errOut, code := runPlugin(t, "snapshot", "-c", name, path)
	if code != 0 || errOut != "" {
		t.Errorf("snapshot piped: exit %d, stderr %q", code, errOut)
	}
}

func forfeitLeadership(t *testing.T, name string, leader kubectletcd.StatusRow) {
	follower := followerOf(t, name)
	if out := mustPlugin(t, "forfeit-leadership", "-p", follower); !strings.Contains(out, "is not the leader") {
		t.Errorf("forfeit-leadership -p follower: %q", out)
	}
	out := mustPlugin(t, "forfeit-leadership", "-c", name)
	prefix := "Leadership moved from " + leader.Name + " to "
	if !strings.HasPrefix(out, prefix) {
		t.Fatalf("forfeit-leadership: %q, want %q...", out, prefix)
	}
	next := strings.TrimSuffix(strings.TrimPrefix(out, prefix), ".\n")
	eventually(t, 30*time.Second, "leadership with "+next, func() (bool, string) {
		l := requireOneLeader(t, pluginStatus(t, name), 3)
		return l.Name == next, l.Name
	})
}

// snapshotPassesEtcdutl: the file is one etcdutl reads, with the keys.
func snapshotPassesEtcdutl(t *testing.T, name string) {
	path := filepath.Join(t.TempDir(), name+".db")
	if out := mustPlugin(t, "snapshot", "-c", name, path); !strings.HasPrefix(out, "Saved a snapshot of member ") {
		t.Errorf("snapshot: %q", out)
	}
	cmd := exec.Command(filepath.Join(bin, "etcdutl"), "snapshot", "status", path, "-w", "json")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v\n%s", err, raw)
	}
	var st struct {
		Revision  int64 `json:"revision"`
		TotalKey  int   `json:"totalKey"`
		TotalSize int64 `json:"totalSize"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.Revision == 0 || st.TotalKey == 0 {
		t.Errorf("etcdutl snapshot status: %s (%v)", raw, err)
	}
	t.Logf("etcdutl snapshot status: %s", bytes.TrimSpace(raw))
}

// testPluginMTLSAuth: a cluster with mutual TLS on both planes from own
// Secrets and etcd auth, whose root password Secret comes only after the
// plugin was used without auth (the operator turns auth on once it can): the
// plugin rejects wrong credentials, works with -s and finds the credentials
// itself once status.authEnabled is set.
func testPluginMTLSAuth(t *testing.T) {
	const name = "secure"
	ns := kubectlNS
	ca := newCA(t)
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	ext := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	createTLSSecret(t, ns, name+"-server", ca.issue(t, "server", domains, ext), ca.certPEM)
	createTLSSecret(t, ns, name+"-peer", ca.issue(t, "peer", domains[:2], ext), ca.certPEM)
	operator := ca.issue(t, "operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, ns, name+"-operator", operator, ca.certPEM)
	password := randomPassword(t)
	createBasicAuth(t, name+"-wrong", "root", "not-"+password)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	cert, err := tls.X509KeyPair(operator.certPEM, operator.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})

	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = ownTLS(name)
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: name + "-root"}}
		c.Spec.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: ptr.To[int64](16 << 20)}
	})
	// Without its password Secret the operator forms the cluster but does
	// not turn auth on yet.
	waitFormed(t, name, 3)
	requireOneLeader(t, pluginStatus(t, name), 3)
	noSpaceIsClearedByDefrag(t, name)
	victim := followerOf(t, name)
	mustPlugin(t, "leave", "-p", victim)
	waitReplaced(t, ns, name, victim, 3, 3*time.Minute)
	waitFormed(t, name, 3)

	createBasicAuth(t, name+"-root", "", password)
	eventually(t, 2*time.Minute, "auth turned on and latched", func() (bool, string) {
		c := getCluster(t, ns, name)
		return c.Status.AuthEnabled, fmt.Sprintf("authEnabled=%t", c.Status.AuthEnabled)
	})
	if out := mustPlugin(t, "members", "-c", name, "-s", ns+"/"+name+"-root"); strings.Count(out, "\n") != 4 {
		t.Errorf("members:\n%s", out)
	}
	_, errOut, code := runPlugin(t, "alarm", "list", "-c", name, "-s", name+"-wrong")
	t.Logf("kubectl etcd alarm list -c %s -s %s-wrong:\n%s", name, name, errOut)
	if code != 1 || !strings.Contains(errOut, "rejected the credentials of user root from secret "+ns+"/"+name+"-wrong") || strings.Count(errOut, "rejected") != 1 {
		t.Errorf("wrong credentials: exit %d, %q", code, errOut)
	}
	if out := mustPlugin(t, "alarm", "list", "-c", name, "-s", ns+"/"+name+"-root"); out != "No alarm is raised.\n" {
		t.Errorf("alarm list -s: %q", out)
	}
	leader := requireOneLeader(t, pluginStatus(t, name, "-s", ns+"/"+name+"-root"), 3)

	// The plugin finds the root credentials from the cluster.
	requireOneLeader(t, pluginStatus(t, name), 3)
	var ms kubectletcd.MemberList
	pluginDecode(t, &ms, "members", "-c", name, "-o", "yaml")
	if len(ms.Items) != 3 {
		t.Errorf("members: %+v", ms)
	}
	if out := mustPlugin(t, "compact", "-c", name); !strings.Contains(out, "ompacted") {
		t.Errorf("compact: %q", out)
	}
	if out := mustPlugin(t, "defrag", "-c", name, "--direct"); !strings.Contains(out, "leader") {
		t.Errorf("defrag: %q", out)
	}
	if out := mustPlugin(t, "alarm", "list", "-p", leader.Name); out != "No alarm is raised.\n" {
		t.Errorf("alarm list: %q", out)
	}
	if out := mustPlugin(t, "alarm", "disarm", "-p", leader.Name); out != "No alarm to disarm.\n" {
		t.Errorf("alarm disarm: %q", out)
	}
	forfeitLeadership(t, name, leader)
	snapshotPassesEtcdutl(t, name)
	reportHasLogsAndNoSecret(t, name, password)
	// A learner added by hand: the operator, which sees etcd, removes a
	// learner no member accounts for too, so either may remove it.
	out := mustPlugin(t, "add-member", "-c", name, "http://extra."+name+"."+ns+".svc:2380")
	id := strings.Fields(out)[2]
	out, errOut, code = runPlugin(t, "remove-member", "-c", name, id)
	t.Logf("kubectl etcd remove-member -c %s %s: exit %d\n%s%s", name, id, code, out, errOut)
	eventually(t, time.Minute, "the learner gone", func() (bool, string) {
		ms = kubectletcd.MemberList{}
		pluginDecode(t, &ms, "members", "-c", name, "-o", "json")
		return !slices.ContainsFunc(ms.Items, func(m kubectletcd.MemberRow) bool { return m.ID == id }), fmt.Sprintf("%+v", ms.Items)
	})
}

// reportHasLogsAndNoSecret takes a diagnostics report of the cluster: the
// members' and the operator's logs come through the API server's log
// endpoint, etcd's view through the members, and the root password is
// nowhere in it.
func reportHasLogsAndNoSecret(t *testing.T, name, password string) {
	t.Helper()
	out := mustPlugin(t, "report", "-c", name, "-o", "json", "--since", "30m")
	if strings.Contains(out, password) {
		t.Fatal("the report holds the root password")
	}
	var r kubectletcd.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report -o json: %v", err)
	}
	var memberLog, operatorLog bool
	for f, text := range r.Files {
		memberLog = memberLog || (strings.HasPrefix(f, "logs/"+name+"-") && strings.HasSuffix(f, "/etcd.log") && strings.Contains(text, "etcd"))
		operatorLog = operatorLog || (strings.HasPrefix(f, "logs/operator/") && text != "")
	}
	if !memberLog || !operatorLog || !strings.Contains(r.Files["etcd/status.json"], `"isLeader": true`) ||
		!strings.Contains(r.Files["objects/secrets-redacted.yaml"], name+"-root") {
		t.Errorf("report: member log %t, operator log %t, files %d, not collected %v\nstatus %s", memberLog, operatorLog, len(r.Files), r.Missing, r.Files["etcd/status.json"])
	}
}

// noSpaceIsClearedByDefrag fills the cluster past its quota, sees the
// NOSPACE alarm, frees the space and lets a whole-cluster defrag disarm it.
func noSpaceIsClearedByDefrag(t *testing.T, name string) {
	c, err := clusterClient(kubectlNS, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	fill(t, c, "bulk/", 32<<20)
	t.Logf("kubectl etcd alarm list -c %s:\n%s", name, mustPlugin(t, "alarm", "list", "-c", name))
	var alarms kubectletcd.AlarmList
	pluginDecode(t, &alarms, "alarm", "list", "-c", name, "-o", "json")
	if len(alarms.Items) == 0 || alarms.Items[0].Alarm != "NOSPACE" {
		t.Fatalf("alarm list after filling the quota: %+v", alarms)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Delete(ctx, "bulk/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	mustPlugin(t, "compact", "-c", name)
	out := mustPlugin(t, "defrag", "-c", name, "--direct")
	t.Logf("kubectl etcd defrag -c %s:\n%s", name, out)
	if !strings.Contains(out, "Disarmed NOSPACE of member ") {
		t.Errorf("defrag did not disarm NOSPACE:\n%s", out)
	}
	if out := mustPlugin(t, "alarm", "list", "-c", name); out != "No alarm is raised.\n" {
		t.Errorf("alarm list after defrag: %q", out)
	}
	if _, err := c.Put(ctx, "after-nospace", "ok"); err != nil {
		t.Errorf("write after the defragmentation: %v", err)
	}
}

// testPluginForeignPod: an etcd Pod the operator did not create, with
// server TLS from a mounted Secret the plugin finds from its flags; its
// membership is the plugin's alone, so the quorum projection is checked
// exactly.
func testPluginForeignPod(t *testing.T) {
	ns := kubectlNS
	ca := newCA(t)
	createTLSSecret(t, ns, "foreign-tls", ca.issue(t, "foreign", []string{"localhost"}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}), ca.certPEM)
	pod := foreignEtcdPod("foreign-etcd")
	if err := k.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "foreign-etcd Ready", func() (bool, string) {
		p := &corev1.Pod{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod.Name}, p); err != nil {
			return false, err.Error()
		}
		return podIsReady(p.Status.Conditions), string(p.Status.Phase)
	})
	var status kubectletcd.MemberStatusList
	pluginDecode(t, &status, "status", "-p", pod.Name, "-o", "json")
	if rows := status.Items; len(rows) != 1 || rows[0].Name != pod.Name || !rows[0].IsLeader || rows[0].Endpoint != "https://localhost:2379" {
		t.Errorf("status: %+v", rows)
	}
	out := mustPlugin(t, "add-member", "-p", pod.Name, "http://learner.example:2380", "--name", "learner")
	if !strings.Contains(out, "as a learner") || !strings.Contains(out, "--initial-cluster=foreign-etcd=http://127.0.0.1:2380,learner=http://learner.example:2380") {
		t.Errorf("add-member: %q", out)
	}
	id := strings.Fields(out)[2]
	_, errOut, code := runPlugin(t, "add-member", "-p", pod.Name, "--voter", "http://voter.example:2380")
	t.Logf("kubectl etcd add-member -p %s --voter http://voter.example:2380:\n%s", pod.Name, errOut)
	if code != 1 || !strings.Contains(errOut, "1 of 2 voters would be healthy, 2 needed") {
		t.Errorf("add-member --voter to one voter: exit %d, %q", code, errOut)
	}
	_, errOut, code = runPlugin(t, "promote-member", "-p", pod.Name, id)
	if code != 1 || !strings.Contains(errOut, "refusing: cannot promote") {
		t.Errorf("promote a learner that never started: exit %d, %q", code, errOut)
	}
	if out := mustPlugin(t, "remove-member", "-p", pod.Name, id); !strings.Contains(out, "Removed member "+id) {
		t.Errorf("remove-member: %q", out)
	}
	_, errOut, code = runPlugin(t, "leave", "-p", pod.Name)
	if code != 1 || !strings.Contains(errOut, "it is the last voter") {
		t.Errorf("leave as the last voter: exit %d, %q", code, errOut)
	}
	if out := mustPlugin(t, "forfeit-leadership", "-p", pod.Name); !strings.Contains(out, "no other voter could take over") {
		t.Errorf("forfeit-leadership alone: %q", out)
	}

	pending := foreignEtcdPod("foreign-pending")
	pending.Spec.NodeSelector = map[string]string{"no-such-node": "true"}
	if err := k.Create(context.Background(), pending); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runPlugin(t, "status", "-p", pending.Name)
	t.Logf("kubectl etcd status -p %s:\n%s", pending.Name, errOut)
	if code != 1 || !strings.Contains(errOut, "pod foreign-pending is not Ready, and its etcd does not run: phase Pending") {
		t.Errorf("status of a Pending Pod: exit %d, %q", code, errOut)
	}
}

// foreignEtcdPod is a single-member etcd with server TLS, as someone might
// run it by hand.
func foreignEtcdPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubectlNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "etcd",
				Image: "quay.io/coreos/etcd:v" + etcdVersion,
				// etcd wants its data directory 0700 and its own: a
				// directory of its making inside the volume is.
				Command: []string{"etcd", "--name=" + name, "--data-dir=/var/lib/etcd/data",
					"--listen-client-urls=https://0.0.0.0:2379", "--advertise-client-urls=https://localhost:2379",
					"--cert-file=/etc/etcd/tls/tls.crt", "--key-file=/etc/etcd/tls/tls.key",
					// Not etcd's default peer URL (http://localhost:2380),
					// which etcd replaces with the Pod's address.
					"--listen-peer-urls=http://0.0.0.0:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
					"--initial-cluster=" + name + "=http://127.0.0.1:2380", "--listen-metrics-urls=http://0.0.0.0:2381"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "tls", MountPath: "/etc/etcd/tls", ReadOnly: true}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(2381)}},
					PeriodSeconds: 1},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "foreign-tls"}}},
			},
		},
	}
}

// --- running the plugin ---

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// pluginPath builds kubectl-etcd once, into a directory for PATH.
func pluginPath(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginErr = os.MkdirTemp("", "kubectl-etcd-")
		if pluginErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version=e2e", "-o", filepath.Join(pluginDir, "kubectl-etcd"), "./cmd/kubectl-etcd")
		cmd.Dir = tools.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("building kubectl-etcd: %w\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

func pluginCommand(t *testing.T, args ...string) *exec.Cmd {
	dir := pluginPath(t)
	cmd := exec.Command("kubectl", append([]string{"etcd", "-n", kubectlNS}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// runPlugin runs `kubectl etcd -n e2e-kubectl ARGS` with stdout and stderr
// piped apart, and returns them with the exit code.
func runPlugin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := pluginCommand(t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl etcd %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

func mustPluginBoth(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, errOut, code := runPlugin(t, args...)
	if code != 0 {
		t.Fatalf("kubectl etcd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out, errOut
}

func mustPlugin(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := mustPluginBoth(t, args...)
	return out
}

// pluginDecode runs a read command with -o json or yaml into v.
func pluginDecode(t *testing.T, v any, args ...string) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(mustPlugin(t, args...)), v); err != nil {
		t.Fatalf("kubectl etcd %s: %v", strings.Join(args, " "), err)
	}
}

// runPluginOnTerminal runs the plugin with stderr on a pseudo-terminal and
// returns stdout and what the terminal showed.
func runPluginOnTerminal(t *testing.T, args ...string) (stdout, terminal string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ptmx.Close() }()
	cmd := pluginCommand(t, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	shown := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptmx) // ends with EIO once the terminal closes
		shown <- string(b)
	}()
	err = cmd.Run()
	_ = tty.Close()
	terminal = <-shown
	if err != nil {
		t.Fatalf("kubectl etcd %s on a terminal: %v\n%s%s", strings.Join(args, " "), err, out.String(), terminal)
	}
	return out.String(), terminal
}

func pluginStatus(t *testing.T, name string, extra ...string) []kubectletcd.StatusRow {
	t.Helper()
	var status kubectletcd.MemberStatusList
	pluginDecode(t, &status, append([]string{"status", "-c", name, "-o", "json"}, extra...)...)
	return status.Items
}

// requireOneLeader checks n readable members, all agreeing on one leader.
func requireOneLeader(t *testing.T, rows []kubectletcd.StatusRow, n int) kubectletcd.StatusRow {
	t.Helper()
	var leaders []kubectletcd.StatusRow
	for _, r := range rows {
		if r.Unreachable != "" || r.Version != etcdVersion {
			t.Errorf("member %s: %+v", r.Name, r)
		}
		if r.IsLeader {
			leaders = append(leaders, r)
		}
	}
	if len(rows) != n || len(leaders) != 1 {
		t.Fatalf("want %d members and one leader: %+v", n, rows)
	}
	for _, r := range rows {
		if r.Leader != leaders[0].ID {
			t.Errorf("%s follows %s, not %s", r.Name, r.Leader, leaders[0].ID)
		}
	}
	return leaders[0]
}

func followerOf(t *testing.T, name string) string {
	t.Helper()
	for _, r := range pluginStatus(t, name) {
		if !r.IsLeader && !r.IsLearner && !r.NotMember {
			return r.Name
		}
	}
	t.Fatalf("%s has no follower", name)
	return ""
}

// waitFormed waits for n ready members that etcd lists as voters, for a
// cluster the operator does not report Available.
func waitFormed(t *testing.T, name string, n int) {
	t.Helper()
	eventually(t, 3*time.Minute, fmt.Sprintf("%s formed with %d voters", name, n), func() (bool, string) {
		c := getCluster(t, kubectlNS, name)
		if int(c.Status.ReadyMembers) != n {
			return false, fmt.Sprintf("ready=%d", c.Status.ReadyMembers)
		}
		err := etcdMatchesMembers(t, kubectlNS, name)
		return err == nil, fmt.Sprint(err)
	})
}

// fill writes about size bytes under prefix in 256 KiB values, until done or
// until etcd refuses for lack of space.
func fill(t *testing.T, c *clientv3.Client, prefix string, size int) {
	t.Helper()
	value := strings.Repeat("x", 256<<10)
	for i := 0; i*len(value) < size; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), value)
		cancel()
		if err != nil && strings.Contains(err.Error(), "database space exceeded") {
			t.Logf("etcd refused write %d: %v", i, err)
			return
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func randomPassword(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func createBasicAuth(t *testing.T, name, user, password string) {
	t.Helper()
	data := map[string][]byte{corev1.BasicAuthPasswordKey: []byte(password)}
	if user != "" {
		data[corev1.BasicAuthUsernameKey] = []byte(user)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubectlNS}, Type: corev1.SecretTypeBasicAuth, Data: data}
	if err := k.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
