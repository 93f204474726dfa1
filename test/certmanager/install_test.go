// Package certmanager tests what `sandbox up --with cert-manager` installs,
// without a sandbox: on a bare kube-apiserver, package certmanager creates
// the CRDs and RBAC, and the toolchain's cert-manager-controller runs as a
// process with the Deployment's own arguments, authenticated as its
// ServiceAccount, so the RBAC rules are what is tested. Only the Pod itself
// (image, probes, in-cluster configuration) is left to the sandbox.
package certmanager

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/certmanager"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// TestInstalledControllerIssues installs cert-manager as the sandbox does and
// issues a CA and a leaf Certificate through it.
func TestInstalledControllerIssues(t *testing.T) {
	ctx := context.Background()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := images.CertManagerDir(filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	crds := filepath.Join(dir, "crds")
	env := &envtest.Environment{BinaryAssetsDirectory: bin}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	if err := certmanager.Install(ctx, cfg, crds, "cert-manager-controller:test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cert-manager CRDs Established", func() (bool, string) {
		ok, why, err := certmanager.CRDsEstablished(ctx, cfg, crds)
		return ok, fmt.Sprint(why, err)
	})

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	log := runAsServiceAccount(t, env, filepath.Join(dir, "cert-manager-controller"))
	issueChain(t, k, log)
	noForbidden(t, log)
}

// noForbidden fails the test for every request the RBAC rules refused, even
// those the controllers retried their way around.
func noForbidden(t *testing.T, log *os.File) {
	t.Helper()
	out, err := os.ReadFile(log.Name())
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "forbidden") {
			t.Errorf("the controller was refused: %s", line)
		}
	}
}

// runAsServiceAccount starts the controller with the installed Deployment's
// arguments and the ServiceAccount's identity, and waits for its /readyz.
func runAsServiceAccount(t *testing.T, env *envtest.Environment, binary string) *os.File {
	t.Helper()
	user, err := env.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + certmanager.Namespace + ":" + certmanager.Name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + certmanager.Namespace, "system:authenticated"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	health := freeAddress(t)
	args := append(deploymentArgs(t), "--kubeconfig="+kubeconfig, "--health-address="+health)
	log, err := os.Create(filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	waitFor(t, "controller /readyz", func() (bool, string) {
		resp, err := http.Get("http://" + health + "/readyz") //nolint:gosec,noctx // the test's own loopback address
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	}, log)
	return log
}

// deploymentArgs are the controller arguments of the Deployment Install makes.
func deploymentArgs(t *testing.T) []string {
	t.Helper()
	for _, o := range certmanager.Objects("x") {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d.Spec.Template.Spec.Containers[0].Args
		}
	}
	t.Fatal("no Deployment among the installed objects")
	return nil
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// waitFor polls ok for up to a minute; on failure it prints the last reason
// and the controller's log, if one is given.
func waitFor(t *testing.T, what string, ok func() (bool, string), logs ...*os.File) {
	t.Helper()
	var why string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var done bool
		done, why = ok()
		return done, nil
	})
	if err == nil {
		return
	}
	for _, l := range logs {
		if out, err := os.ReadFile(l.Name()); err == nil {
			t.Logf("controller log:\n%s", out)
		}
	}
	t.Fatalf("%s: not true after a minute: %s", what, why)
}

// issueChain: SelfSigned ClusterIssuer, CA Certificate, CA Issuer, leaf; the
// leaf verifies against the CA.
func issueChain(t *testing.T, k client.Client, log *os.File) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{}
	ns.GenerateName = "cm-"
	if err := k.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	issuerRef := func(kind, name string) map[string]any {
		return map[string]any{"group": "cert-manager.io", "kind": kind, "name": name}
	}
	objects := []*unstructured.Unstructured{
		cmObject("ClusterIssuer", "", "selfsigned", map[string]any{"selfSigned": map[string]any{}}),
		cmObject("Certificate", ns.Name, "ca", map[string]any{
			"isCA": true, "commonName": "test CA", "secretName": "ca-tls",
			"issuerRef": issuerRef("ClusterIssuer", "selfsigned"),
		}),
		cmObject("Issuer", ns.Name, "ca", map[string]any{"ca": map[string]any{"secretName": "ca-tls"}}),
		cmObject("Certificate", ns.Name, "leaf", map[string]any{
			"dnsNames": []any{"etcd-0.etcd." + ns.Name + ".svc"}, "secretName": "leaf-tls",
			"issuerRef": issuerRef("Issuer", "ca"),
		}),
	}
	for _, o := range objects {
		if err := k.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, o := range objects {
		waitFor(t, o.GetKind()+" "+o.GetName()+" Ready", func() (bool, string) {
			cur := cmObject(o.GetKind(), o.GetNamespace(), o.GetName(), nil)
			if err := k.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
					return m["status"] == "True", fmt.Sprint(m["reason"], ": ", m["message"])
				}
			}
			return false, "no Ready condition"
		}, log)
	}
	verifyLeaf(t, k, ns.Name, "leaf-tls", "etcd-0.etcd."+ns.Name+".svc")
}

func cmObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion("cert-manager.io/v1")
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func verifyLeaf(t *testing.T, k client.Client, namespace, secret, dnsName string) {
	t.Helper()
	var s corev1.Secret
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	leaf, ca := firstCertificate(t, s.Data["tls.crt"]), firstCertificate(t, s.Data["ca.crt"])
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("leaf does not verify against ca.crt for %s: %v", dnsName, err)
	}
	if len(s.Data["tls.key"]) == 0 {
		t.Error("leaf Secret has no tls.key")
	}
}

func firstCertificate(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
