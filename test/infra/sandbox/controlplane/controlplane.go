// Package controlplane runs the real Kubernetes control plane of a sandbox
// from the pinned toolchain: an etcd for the API server, kube-apiserver,
// kube-controller-manager and kube-scheduler, and the one kube-proxy that
// routes Services for every node, each a supervised child process of the
// daemon with its log in D/logs.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/pki"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/proc"
)

// ControlPlane is the running set of control-plane processes.
type ControlPlane struct {
	procs []*proc.Process
}

// Options says where the binaries are and how the node lifecycle behaves.
type Options struct {
	ToolsBin string
	// NodeMonitorGracePeriod is how long a silent node stays Ready.
	NodeMonitorGracePeriod time.Duration
}

// Start launches etcd, kube-apiserver (waiting until it is ready),
// kube-controller-manager and kube-scheduler. On error it stops whatever
// it started.
func Start(ctx context.Context, in *instance.Instance, opts Options) (*ControlPlane, error) {
	cp := &ControlPlane{}
	ok := false
	defer func() {
		if !ok {
			cp.Stop()
		}
	}()
	etcdURL, err := cp.startEtcd(ctx, in, opts)
	if err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, in, opts, etcdURL); err != nil {
		return nil, err
	}
	if err := cp.startControllers(in, opts); err != nil {
		return nil, err
	}
	ok = true
	return cp, nil
}

// Stop ends every process, the API server's etcd last. The state is thrown
// away with the directory, so nobody gets more than 2 s to shut down.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].Stop(2 * time.Second)
	}
	cp.procs = nil
}

func (cp *ControlPlane) add(in *instance.Instance, opts Options, name string, args []string) (*proc.Process, error) {
	p := &proc.Process{
		Name:    name,
		Path:    filepath.Join(opts.ToolsBin, name),
		Args:    args,
		Env:     append(os.Environ(), in.Marker()),
		LogPath: filepath.Join(in.LogDir(), name+".log"),
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context, in *instance.Instance, opts Options) (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	// Loopback only: Pods on the bridge must not reach the cluster's store.
	args := []string{
		"--name=sandbox", "--data-dir=" + in.Path("etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=sandbox=" + peer,
		// A throwaway cluster: durability buys nothing and fsync costs seconds
		// on a busy disk.
		"--unsafe-no-fsync", "--log-level=warn",
	}
	p, err := cp.add(in, opts, "etcd", args)
	if err != nil {
		return "", err
	}
	hc := &http.Client{Timeout: time.Second}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return client, p.WaitFor(waitCtx, "healthy", func(ctx context.Context) error {
		return get(ctx, hc, client+"/health")
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, in *instance.Instance, opts Options, etcdURL string) error {
	dir := PKIDir(in)
	f := func(name string) string { return filepath.Join(dir, name) }
	host := in.APIServerIP().String()
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + host, "--advertise-address=" + host,
		"--secure-port=" + strconv.Itoa(instance.APIServerPort),
		"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + f("ca.crt"),
		"--service-cluster-ip-range=" + in.ServiceCIDR().String(),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + f("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// The issuer's keys where a Pod finds them (by default the
		// address this host uses), for a store that trusts the cluster's
		// ServiceAccount tokens (an OpenID provider's JWKS).
		"--service-account-jwks-uri=https://kubernetes.default.svc/openid/v1/jwks",
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--default-not-ready-toleration-seconds=10",
		"--default-unreachable-toleration-seconds=10",
		"--allow-privileged=true",
		"--profiling=false",
		"--event-ttl=1h",
	}
	p, err := cp.add(in, opts, "kube-apiserver", args)
	if err != nil {
		return err
	}
	hc, err := adminHTTPClient(in)
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	url := fmt.Sprintf("https://%s/readyz", net.JoinHostPort(host, strconv.Itoa(instance.APIServerPort)))
	return p.WaitFor(waitCtx, "ready", func(ctx context.Context) error { return get(ctx, hc, url) })
}

func (cp *ControlPlane) startControllers(in *instance.Instance, opts Options) error {
	dir := PKIDir(in)
	f := func(name string) string { return filepath.Join(dir, name) }
	host := in.APIServerIP().String()
	grace := opts.NodeMonitorGracePeriod
	if grace == 0 {
		grace = 20 * time.Second
	}
	cm := []string{
		"--kubeconfig=" + f("controller-manager.kubeconfig"),
		"--authentication-kubeconfig=" + f("controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + f("controller-manager.kubeconfig"),
		// Each instance has its own network namespace, so default ports
		// never clash.
		"--bind-address=" + host,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + f("sa.key"),
		"--root-ca-file=" + f("ca.crt"),
		"--cluster-signing-cert-file=" + f("ca.crt"), "--cluster-signing-key-file=" + f("ca.key"),
		"--controllers=*",
		"--allocate-node-cidrs=false",
		"--node-monitor-period=2s",
		"--node-monitor-grace-period=" + grace.String(),
		"--kube-api-qps=100", "--kube-api-burst=200",
		"--profiling=false",
	}
	if _, err := cp.add(in, opts, "kube-controller-manager", cm); err != nil {
		return err
	}
	sched := []string{
		"--kubeconfig=" + f("scheduler.kubeconfig"),
		"--authentication-kubeconfig=" + f("scheduler.kubeconfig"),
		"--authorization-kubeconfig=" + f("scheduler.kubeconfig"),
		"--bind-address=" + host,
		"--leader-elect=false",
		"--profiling=false",
	}
	_, err := cp.add(in, opts, "kube-scheduler", sched)
	return err
}

// freePorts asks the kernel for n unused loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func get(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// adminHTTPClient talks to the API server with the admin certificate.
func adminHTTPClient(in *instance.Instance) (*http.Client, error) {
	dir := PKIDir(in)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in " + dir)
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

// PKIDir holds the CA, the certificates and the component kubeconfigs.
func PKIDir(in *instance.Instance) string { return in.Path("pki") }

// LoadCA reads the sandbox CA.
func LoadCA(in *instance.Instance) (*pki.CA, error) { return pki.LoadCA(PKIDir(in)) }

// StartProxy starts kube-proxy in nftables mode for the whole sandbox (every
// node's bridge is in the one network namespace it programs). It leaves the
// machine-wide conntrack settings alone.
func (cp *ControlPlane) StartProxy(in *instance.Instance, opts Options) error {
	conf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
  qps: 50
  burst: 100
mode: nftables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
detectLocalMode: ClusterCIDR
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(PKIDir(in), "kube-proxy.kubeconfig"), in.PodCIDR, instance.NodeName(0), in.APIServerIP())
	file := in.Path("kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return err
	}
	_, err := cp.add(in, opts, "kube-proxy", []string{"--config=" + file, "--v=1"})
	return err
}
