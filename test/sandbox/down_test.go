package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
)

// TestDownLeavesNothing: `down` removes every process (containers
// included), cgroup, network namespace, link, mount and directory of a
// sandbox and leaves the host's nftables rules and kernel settings as they
// were, both after a clean run and after the daemon was killed (a crash); a
// second `down` succeeds. Its sandboxes run beside the suite's, which also
// shows two instances coexist.
func TestDownLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sb")
			ctx := context.Background()
			before := hostState(t)
			s, err := sandbox.Up(ctx, sandbox.Config{Dir: dir, Nodes: 1, Binary: binary})
			if err != nil {
				t.Fatal(err)
			}
			in := s.Instance()
			startWorkload(t, s)
			if crash {
				pid := daemonPID(t, dir)
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			out, err := exec.Command(binary, "down", "--dir", dir).CombinedOutput()
			if err != nil {
				t.Fatalf("sandbox down: %v\n%s", err, out)
			}
			assertNothingLeft(t, dir, &in)
			if after := hostState(t); after != before {
				t.Errorf("the host's nftables rules or kernel settings changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if out, err := exec.Command(binary, "down", "--dir", dir).CombinedOutput(); err != nil {
				t.Fatalf("a second down failed: %v\n%s", err, out)
			}
		})
	}
}

// startWorkload runs a Pod with a tmpfs and a claim, so the sandbox has
// mounts, a namespace and container processes to leave behind.
func startWorkload(t *testing.T, s *sandbox.Sandbox) {
	cfg, err := s.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if err := s.AddImage(ctx, helperImage, helperRoot); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := kc.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := helperPod("w", []string{"sleep"}, func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}, {Name: "data", MountPath: "/data"}}
	})
	waitFor(t, 30*time.Second, "the default service account", func() (bool, string) {
		_, err := kc.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if _, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the workload Running", func() (bool, string) {
		p, err := kc.CoreV1().Pods("default").Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return running(p), podSummary(p)
	})
}

func daemonPID(t *testing.T, dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "daemon.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// assertNothingLeft checks the host independently of the sandbox's own
// cleanup code: /run/netns, /sys/class/net, the cgroup hierarchies,
// /proc/self/mountinfo, /proc.
func assertNothingLeft(t *testing.T, dir string, in *instance.Instance) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/run/netns", in.NetnsName())); err == nil {
		t.Errorf("network namespace %s left behind", in.NetnsName())
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", in.HostLink())); err == nil {
		t.Errorf("link %s left behind", in.HostLink())
	}
	for _, hierarchy := range dirEntries("/sys/fs/cgroup") {
		for _, root := range []string{filepath.Join("/sys/fs/cgroup", hierarchy), "/sys/fs/cgroup"} {
			if _, err := os.Stat(filepath.Join(root, in.CgroupName())); err == nil {
				t.Errorf("cgroup %s left behind", filepath.Join(root, in.CgroupName()))
			}
		}
	}
	for _, mp := range mountPoints(t) {
		if strings.HasPrefix(mp, dir) {
			t.Errorf("mount %s left behind", mp)
		}
	}
	for _, pid := range dirEntries("/proc") {
		env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		if err == nil && strings.Contains(string(env), "SANDBOX_INSTANCE="+in.Name+"\x00") {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			t.Errorf("process %s left behind: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("directory %s left behind", dir)
	}
}

// hostState is what a sandbox must not change on the host: its nftables
// rules and the kernel settings the kubelet would set.
func hostState(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v: %s", err, out)
	}
	var b strings.Builder
	b.Write(out)
	for _, f := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"} {
		v, err := os.ReadFile(filepath.Join("/proc/sys", f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s", f, v)
	}
	return b.String()
}

func dirEntries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func mountPoints(t *testing.T) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, fields[4])
		}
	}
	return out
}

// TestNotRoot: without root every command fails with one clear line.
func TestNotRoot(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(lines[0], "root") {
		t.Errorf("as nobody: %v, output %q; want a failure with one line about root", err, out)
	}
}
