package manifest

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// Timing options and extra flags reach etcd's command line after the
// operator's own flags, extra flags sorted by name; env reaches the etcd
// container; and a change of any of them changes the template hash (it
// rolls out) while a member that sets none keeps its hash.
func TestTuning(t *testing.T) {
	m := &v1alpha2.EtcdMember{}
	m.Name, m.Spec.Version, m.Spec.ClusterToken = "m", "3.6.16", "tok"
	before := TemplateHash(m)
	m.Spec.Options = &v1alpha2.EtcdOptions{HeartbeatInterval: ptr.To[int32](250), ElectionTimeout: ptr.To[int32](2500)}
	m.Spec.ExtraArgs = map[string]string{"max-txn-ops": "512", "log-level": "warn"}
	m.Spec.Env = []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "2"}}
	cmd := EtcdCommand(m)
	i := slices.Index(cmd, "--heartbeat-interval=250")
	if i < 0 || !slices.Contains(cmd, "--election-timeout=2500") {
		t.Fatalf("timing options missing from %v", cmd)
	}
	tail := cmd[len(cmd)-2:]
	if !slices.Equal(tail, []string{"--log-level=warn", "--max-txn-ops=512"}) {
		t.Errorf("extra flags %v, want them last and sorted", tail)
	}
	env := Pod(m, PodOptions{OperatorImage: "op:1"}).Spec.Containers[0].Env
	if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == "GOMAXPROCS" && e.Value == "2" }) {
		t.Errorf("env %v lacks GOMAXPROCS", env)
	}
	tuned := TemplateHash(m)
	for name, change := range map[string]func(*v1alpha2.EtcdMember){
		"heartbeatInterval": func(m *v1alpha2.EtcdMember) { m.Spec.Options.HeartbeatInterval = ptr.To[int32](200) },
		"electionTimeout":   func(m *v1alpha2.EtcdMember) { m.Spec.Options.ElectionTimeout = nil },
		"extraArgs":         func(m *v1alpha2.EtcdMember) { m.Spec.ExtraArgs["log-level"] = "info" },
		"env":               func(m *v1alpha2.EtcdMember) { m.Spec.Env = nil },
	} {
		c := m.DeepCopy()
		change(c)
		if TemplateHash(c) == tuned {
			t.Errorf("changing %s leaves the template hash as it is: it would not roll out", name)
		}
	}
	none := m.DeepCopy()
	none.Spec.Options, none.Spec.ExtraArgs, none.Spec.Env = nil, map[string]string{}, []corev1.EnvVar{}
	if TemplateHash(none) != before {
		t.Errorf("empty extraArgs and env change the hash")
	}
}

// TestTimingContract holds the CEL rule on the timing options to what each
// etcd release does: it starts with the options the operator renders when
// the election timeout is five heartbeats, and refuses to start with less
// (the rule's message says so).
func TestTimingContract(t *testing.T) {
	versions, err := tools.Pinned("ETCD_VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range strings.Fields(versions) {
		for _, tc := range []struct {
			heartbeat, election int32
			starts              bool
		}{{200, 1000, true}, {300, 1000, false}} {
			t.Run(fmt.Sprintf("%s/heartbeat %d election %d", v, tc.heartbeat, tc.election), func(t *testing.T) {
				t.Parallel()
				o := &v1alpha2.EtcdOptions{HeartbeatInterval: ptr.To(tc.heartbeat), ElectionTimeout: ptr.To(tc.election)}
				err := runEtcd(t, v, append(optionFlags(o, ""), extraFlags(map[string]string{"max-txn-ops": "256"})...))
				if (err == nil) != tc.starts {
					t.Errorf("heartbeat %d, election %d: started %t, want %t (%v)", tc.heartbeat, tc.election, err == nil, tc.starts, err)
				}
			})
		}
	}
}

// runEtcd starts a one-member etcd of the release with the flags and
// reports whether it served, or why not.
func runEtcd(t *testing.T, version string, flags []string) error {
	t.Helper()
	dir, err := tools.EtcdDir(version)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	peer, client := "http://"+freeLoopback(t), "http://"+freeLoopback(t)
	args := append([]string{"--name=m", "--data-dir=" + filepath.Join(tmp, "data"),
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=m=" + peer,
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client}, flags...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "etcd"), args...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-exited:
			return &exitError{err: err, log: log.String()}
		case <-deadline:
			t.Fatalf("etcd %s neither served nor exited within 30s:\n%s", version, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(client + "/health"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				if err := <-exited; err == nil {
					t.Logf("etcd %s exited cleanly on its kill", version)
				}
				return nil
			}
		}
	}
}

type exitError struct {
	err error
	log string
}

func (e *exitError) Error() string {
	lines := strings.Split(strings.TrimSpace(e.log), "\n")
	return e.err.Error() + ": " + lines[len(lines)-1]
}
