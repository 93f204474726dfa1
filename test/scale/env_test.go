package scale

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// env is the harness's Kubernetes: a real kube-apiserver with its own etcd
// (envtest), kube-controller-manager for the EndpointSlices and garbage
// collection a cluster has, and the operator binary as shipped.
type env struct {
	dir        string
	cfg        *rest.Config
	kubeconfig string
	test       *envtest.Environment
	kcm        *exec.Cmd
	operator   *operator
}

func startEnv(t *testing.T) *env {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "scale-")
	if err != nil {
		t.Fatal(err)
	}
	// The logs of a failed run stay for a look.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	e := &env{dir: dir}
	addPodRange(t)
	e.test = &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(tools.RepoRoot(), "charts", "etcd-operator", "crd-bases")},
		ErrorIfCRDPathMissing: true,
	}
	// A fleet writes more than envtest's defaults expect, and has a client
	// Service per cluster: envtest's Service range (a /24) ran out at 254
	// clusters, and the operator retried the Services of the rest at every
	// pass.
	e.test.ControlPlane.GetAPIServer().Configure().
		Set("max-requests-inflight", "800").Set("max-mutating-requests-inflight", "400").
		Set("service-cluster-ip-range", "10.96.0.0/16")
	if e.cfg, err = e.test.Start(); err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = e.test.Stop() })
	e.cfg.QPS, e.cfg.Burst = 500, 1000
	user, err := e.test.AddUser(envtest.User{Name: "scale-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	e.kcm = exec.Command(filepath.Join(bin, "kube-controller-manager"), "--kubeconfig="+e.kubeconfig,
		"--controllers=endpointslice,garbagecollector", "--leader-elect=false", "--secure-port=0",
		"--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-service-endpoint-syncs=10", "--concurrent-gc-syncs=10")
	e.kcm.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	e.kcm.Stdout, e.kcm.Stderr = logFile(t, e.dir, "kube-controller-manager.log"), logFile(t, e.dir, "kube-controller-manager.log")
	if err := e.kcm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kcm.Process.Kill(); _ = e.kcm.Wait() })
	return e
}

func logFile(t *testing.T, dir, name string) io.Writer {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// buildOperator builds the operator's binary as the image ships it.
func buildOperator(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/etcd-operator")
	cmd.Dir = tools.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, b)
	}
	return out
}

// operator is one run of the operator's process.
type operator struct {
	cmd     *exec.Cmd
	metrics string
	started time.Time
}

// startOperator runs the binary with the chart's flags but for leader
// election (one replica: a lease renewal is a write every few seconds
// that has nothing to do with the fleet) and plain-HTTP metrics.
func (e *env) startOperator(t *testing.T, bin string, run int) *operator {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(bin, "--leader-elect=false", "--metrics-secure=false",
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(freePort(t)),
		"--cluster-domain=cluster.local", "--operator-image=hollow.invalid/etcd-operator:scale",
		"--etcd-image-repository=hollow.invalid/etcd")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := logFile(t, e.dir, fmt.Sprintf("operator-%d.log", run))
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &operator{cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), started: time.Now()}
	t.Cleanup(o.kill)
	e.operator = o
	return o
}

func (o *operator) kill() {
	if o.cmd.ProcessState == nil {
		_ = o.cmd.Process.Signal(syscall.SIGKILL)
		_ = o.cmd.Wait()
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// scrape reads the operator's metrics.
func (o *operator) scrape() (map[string]*dto, error) {
	resp, err := http.Get(o.metrics) //nolint:noctx // a local scrape
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]*dto{}
	for name, f := range families {
		d := &dto{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := 0.0
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				v = m.GetUntyped().GetValue()
			}
			d.samples = append(d.samples, sample{labels: labels, value: v})
		}
		out[name] = d
	}
	return out, nil
}

type sample struct {
	labels map[string]string
	value  float64
}

type dto struct{ samples []sample }

// sum adds the samples whose labels match every given pair.
func (d *dto) sum(match map[string]string) float64 {
	if d == nil {
		return 0
	}
	total := 0.0
next:
	for _, s := range d.samples {
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// proc is the operator's resident memory (MiB) and CPU seconds so far.
func (o *operator) proc() (rssMiB, cpuSeconds float64, err error) {
	pid := o.cmd.Process.Pid
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			rssMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command (which may hold spaces) start after ")".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return rssMiB, (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(ctx context.Context, t *testing.T, what string, timeout, every time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(every):
		}
	}
	t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
}

// podRange is where hollow Pods get their addresses: the benchmarking
// range of RFC 2544, made local to this host like 127.0.0.0/8 (an
// EndpointSlice may not list a loopback address). Needs root.
const podRange = "198.18.0.0/15"

func addPodRange(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "route", "show", "table", "local", podRange).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v: %s", err, out)
	}
	// A run that was killed leaves the route; this one removes it either way.
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", "local", podRange, "dev", "lo", "table", "local").Run() })
	if strings.TrimSpace(string(out)) != "" {
		return
	}
	if out, err := exec.Command("ip", "route", "add", "local", podRange, "dev", "lo", "table", "local").CombinedOutput(); err != nil {
		t.Fatalf("making %s local (the scale harness needs root): %v: %s", podRange, err, out)
	}
}
