package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// newNamespace creates a namespace for one test, waits for its default
// service account, dumps its state if the test fails, and deletes it.
func newNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	prefix := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: trim(prefix, 40) + "-"}}
	ns, err := k.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, ns.Name)
		}
		_ = k.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	waitFor(t, 30*time.Second, "default service account", func() (bool, string) {
		_, err := k.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return ns.Name
}

func trim(s string, n int) string {
	if len(s) > n {
		return strings.Trim(s[:n], "-")
	}
	return strings.Trim(s, "-")
}

// waitFor polls cond every 100 ms until it holds or the deadline passes;
// the failure names what was awaited and the last observation.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, obs := cond()
		last = obs
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: last seen: %s", timeout, what, last)
	}
}

// waitPod waits until the Pod satisfies cond and returns it.
func waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, timeout, fmt.Sprintf("pod %s/%s %s", ns, name, what), func() (bool, string) {
		p, err := k.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return cond(p), podSummary(p)
	})
	return pod
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// podSummary is a one-line view of a Pod for failure messages.
func podSummary(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s node=%s ip=%s ready=%v", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP, ready(p))
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s restarts=%d state=%s last=%s]", cs.Name, cs.RestartCount, stateString(cs.State), stateString(cs.LastTerminationState))
	}
	return b.String()
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason + ":" + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%s:%d:%q", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "-"
}

// dump logs the namespace's Pods, events and the sandbox daemon's log tail.
func dump(t *testing.T, ns string) {
	ctx := context.Background()
	pods, _ := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for i := range pods.Items {
		t.Logf("pod %s: %s", pods.Items[i].Name, podSummary(&pods.Items[i]))
	}
	events, _ := k.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range events.Items {
		t.Logf("event %s %s %s: %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
	}
	data, _ := os.ReadFile(filepath.Join(sb.LogDir(), "daemon.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	t.Logf("daemon log tail:\n%s", strings.Join(lines[max(0, len(lines)-20):], "\n"))
}

// kubectl runs kubectl against the suite's sandbox and returns its output:
// stdout, and stderr too when it fails.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+sb.Kubeconfig())
	// kubectl warns on stderr now and then (websocket stream noise): only
	// a failure's stderr matters.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// mustKubectl fails the test when kubectl fails.
func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectl(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// helperPod is a Pod running the test image with the given arguments.
func helperPod(name string, args []string, mods ...func(*corev1.Pod)) *corev1.Pod {
	zero := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "main", Image: helperImage, Command: append([]string{"/bin/helper"}, args...),
			}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func createPod(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := k.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return created
}

// deletePodAndWait deletes a Pod and waits until it is gone.
func deletePodAndWait(t *testing.T, ns, name string) {
	t.Helper()
	if err := k.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
	waitFor(t, time.Minute, "pod "+name+" to be gone", func() (bool, string) {
		_, err := k.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
}

// execIn runs a command in a container through kubectl exec.
func execIn(t *testing.T, ns, pod string, cmd ...string) (string, error) {
	t.Helper()
	return kubectl(t, append([]string{"exec", "-n", ns, pod, "--"}, cmd...)...)
}
