package sandbox_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestKubectlLogs: `kubectl logs` shows the current container's output,
// `-p` the previous instance's, `--tail` the last lines.
func TestKubectlLogs(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("talker", []string{"sleep"}))
	waitPod(t, ns, "talker", 30*time.Second, "Running", running)
	waitFor(t, 10*time.Second, "the first log line", func() (bool, string) {
		out, _ := kubectl(t, "logs", "-n", ns, "talker")
		return out == "sleeping\n", out
	})
	if err := sb.Kill(t.Context(), ns, "talker", "main"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "talker", 30*time.Second, "restarted", func(p *corev1.Pod) bool {
		return p.Status.ContainerStatuses[0].RestartCount == 1 && running(p)
	})
	if out := mustKubectl(t, "logs", "-n", ns, "talker", "-p"); out != "sleeping\n" {
		t.Errorf("logs -p = %q", out)
	}
	if out := mustKubectl(t, "logs", "-n", ns, "talker", "--tail=1", "--timestamps"); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+ sleeping\n$`).MatchString(out) {
		t.Errorf("logs --tail=1 --timestamps = %q", out)
	}
}

// TestKubectlExec: exec runs in the container's root, namespaces and user,
// passes stdin and exit codes, and works with a terminal (-it).
func TestKubectlExec(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	user := int64(65532)
	createPod(t, ns, helperPod("shell", []string{"sleep"}, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &user, RunAsGroup: &user, FSGroup: &user}
		p.Spec.Containers[0].WorkingDir = "/tmp"
	}))
	p := waitPod(t, ns, "shell", 30*time.Second, "Running", running)

	if out := mustKubectl(t, "exec", "-n", ns, "shell", "--", "/bin/helper", "id"); out != "uid=65532 gid=65532 groups=[65532] cwd=/tmp\n" {
		t.Errorf("id = %q", out)
	}
	if out := mustKubectl(t, "exec", "-n", ns, "shell", "--", "/bin/helper", "cat", "/etc/hostname"); out != "shell\n" {
		t.Errorf("hostname file = %q", out)
	}
	if out, _ := kubectl(t, "exec", "-n", ns, "shell", "--", "/bin/helper", "exit", "7"); !strings.Contains(out, "exit code 7") {
		t.Errorf("exit code not propagated: %q", out)
	}
	// -it needs a terminal on kubectl's side: script(1) provides one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "script", "-qec", "kubectl exec -it -n "+ns+" shell -- /bin/helper resolve shell", "/dev/null")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+sb.Kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), p.Status.PodIP+"\r\n") {
		t.Errorf("exec -it: %v: %q (want the Pod IP %s and a terminal's CRLF)", err, out, p.Status.PodIP)
	}
}

// TestKubectlPortForward: port-forward reaches a port of the Pod.
func TestKubectlPortForward(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createPod(t, ns, helperPod("web", []string{"serve", "8080"}))
	waitPod(t, ns, "web", 30*time.Second, "Running", running)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "port-forward", "-n", ns, "pod/web", ":8080")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+sb.Kubeconfig())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer cancel()
	local := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+)`).FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-local:
	case <-time.After(20 * time.Second):
		t.Fatal("port-forward did not start forwarding")
	}
	waitFor(t, 10*time.Second, "an answer through the tunnel", func() (bool, string) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body) == "hello from web\n", string(body)
	})
}
