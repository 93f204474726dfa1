package kubectletcd

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

const reportPassword = "s3cr3t-root-pw"

// reportEnv is cluster c with auth on (its root password in Secret root),
// member c-c down and without logs, c-b restarted once, an event and a
// snapshot of its own beside another cluster's, and the operator in
// namespace ops.
func reportEnv(t *testing.T) *fakeEnv {
	t.Helper()
	e := newFakeEtcd("c-a", "c-b", "c-c")
	e.member("c-c").down = true
	e.user, e.password = "root", reportPassword
	c := cluster("c", func(c *v1alpha2.EtcdCluster) {
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root"}}
		c.Status.AuthEnabled = true
	})
	restartedOnce := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", RestartCount: 1, Ready: true}}
	}
	event := func(name, about string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: about, Namespace: "ns"}, Reason: "Seen-" + about,
			LastTimestamp: metav1.NewTime(time.Now())}
	}
	snap := func(name, of string) *v1alpha2.EtcdSnapshot {
		s := &v1alpha2.EtcdSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		s.Spec.ClusterRef.Name = of
		return s
	}
	op := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-operator-1", Namespace: "ops", Labels: map[string]string{"app.kubernetes.io/name": "etcd-operator"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager"}}}}
	env := newFakeEnv(t, e, c, memberPod("c", "c-a"), memberPod("c", "c-b", restartedOnce), memberPod("c", "c-c"),
		secret("root", map[string]string{"password": reportPassword}), event("e1", "c-a"), event("e2", "unrelated"),
		snap("nightly", "c"), snap("theirs", "other"), op)
	env.logs = map[string]string{
		"ns/c-a/etcd":                 "etcd a says hello\n",
		"ns/c-b/etcd":                 "etcd b runs again\n",
		"ns/c-b/etcd/previous":        "etcd b crashed\n",
		"ops/etcd-operator-1/manager": "the operator reconciles\n",
	}
	return env
}

// report -c collects the cluster's objects (its own only), events about
// them, the Secrets it uses without a value, what etcd says, and the logs
// of the members (a restarted one's previous run too) and of the operator
// over --since; what cannot be had (a member down, a log the API server
// refuses) is listed, and the rest collected anyway.
func TestReportCollectsAndRedacts(t *testing.T) {
	env := reportEnv(t)
	code, out, errOut := env.run("report", "-c", "c", "-o", "json", "--since", "30m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, reportPassword) {
		t.Fatal("the report holds the root password")
	}
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	hasFiles(t, r, "README.txt", "objects/etcdcluster.yaml", "objects/pods.yaml", "objects/etcdmembers.yaml", "objects/secrets-redacted.yaml",
		"objects/events.yaml", "objects/etcdsnapshots.yaml", "etcd/status.json", "etcd/members.json",
		"logs/c-a/etcd.log", "logs/c-b/etcd.log", "logs/c-b/etcd.previous.log", "logs/operator/ops/etcd-operator-1/manager.log")
	if got := r.Files["logs/c-b/etcd.previous.log"]; got != "etcd b crashed\n" {
		t.Errorf("previous log %q", got)
	}
	if s := r.Files["objects/secrets-redacted.yaml"]; !strings.Contains(s, "password: 14") || !strings.Contains(s, "name: root") {
		t.Errorf("the Secret is not listed with its key's size:\n%s", s)
	}
	if ev := r.Files["objects/events.yaml"]; !strings.Contains(ev, "Seen-c-a") || strings.Contains(ev, "Seen-unrelated") {
		t.Errorf("events not those of the cluster's objects:\n%s", ev)
	}
	if sn := r.Files["objects/etcdsnapshots.yaml"]; !strings.Contains(sn, "nightly") || strings.Contains(sn, "theirs") {
		t.Errorf("snapshots not the cluster's:\n%s", sn)
	}
	if st := r.Files["etcd/status.json"]; !strings.Contains(st, `"name": "c-a"`) || !strings.Contains(st, "connection refused") {
		t.Errorf("etcd status:\n%s", st)
	}
	checkMissingAndWindow(t, env, r)
}

func hasFiles(t *testing.T, r Report, files ...string) {
	t.Helper()
	for _, f := range files {
		if _, ok := r.Files[f]; !ok {
			t.Errorf("the report has no %s; it has %v", f, keys(r.Files))
		}
	}
}

// checkMissingAndWindow: the down member and its log are listed as not
// collected, and every log was asked for the last 30 minutes, bounded.
func checkMissingAndWindow(t *testing.T, env *fakeEnv, r Report) {
	t.Helper()
	missing := strings.Join(r.Missing, "\n")
	if !strings.Contains(missing, "etcd status of c-c") || !strings.Contains(missing, "logs/c-c/etcd.log") {
		t.Errorf("not listed as missing: the down member and its log:\n%s", missing)
	}
	if !strings.Contains(r.Files["README.txt"], "Not collected") {
		t.Errorf("README does not say what is missing:\n%s", r.Files["README.txt"])
	}
	for _, o := range env.logOpts {
		if !o.Previous && (o.SinceSeconds == nil || *o.SinceSeconds != 1800) || o.LimitBytes == nil {
			t.Errorf("a log was asked with %+v, want the last 30 minutes and a limit", o)
		}
	}
}

// Without -o the report goes into a .tar.gz, which is never overwritten.
func TestReportTarball(t *testing.T) {
	env := reportEnv(t)
	file := filepath.Join(t.TempDir(), "r.tar.gz")
	code, out, errOut := env.run("report", "-c", "c", "--file", file)
	if code != 0 || !strings.Contains(out, "Wrote "+file) || !strings.Contains(out, "not collected") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if strings.Contains(string(data), reportPassword) {
			t.Errorf("%s holds the root password", h.Name)
		}
		names[h.Name] = true
	}
	for _, want := range []string{"etcd-report-ns-c/README.txt", "etcd-report-ns-c/logs/c-a/etcd.log", "etcd-report-ns-c/etcd/status.json"} {
		if !names[want] {
			t.Errorf("the tarball lacks %s: %v", want, keys(names))
		}
	}
	if code, _, errOut := env.run("report", "-c", "c", "--file", file); code != 1 || !strings.Contains(errOut, "exists") {
		t.Errorf("a second report to the same file: exit %d, %q", code, errOut)
	}
}

func TestReportUsage(t *testing.T) {
	env := reportEnv(t)
	for _, args := range [][]string{{"report", "-p", "c-a"}, {"report"}, {"report", "-c", "c", "-o", "yaml"}, {"report", "-c", "c", "--since", "0s"}} {
		if code, _, errOut := env.run(args...); code != 2 {
			t.Errorf("%v: exit %d, %q; want 2", args, code, errOut)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
