package controlplane

import (
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/seed74754924/etcd-operator/test/infra/sandbox/instance"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/pki"
)

// identity is one client of the API server and the kubeconfig it gets.
type identity struct {
	file string
	cn   string
	orgs []string
}

var identities = []identity{
	{file: "admin", cn: "sandbox-admin", orgs: []string{"system:masters"}},
	{file: "controller-manager", cn: "system:kube-controller-manager"},
	{file: "scheduler", cn: "system:kube-scheduler"},
	{file: "kube-proxy", cn: "system:kube-proxy"},
}

// WritePKI creates the CA, the API server's certificates, the service
// account signing key, a kubeconfig per component and the admin kubeconfig
// at D/kubeconfig. An existing CA is reused so a restarted daemon keeps
// clients' trust.
func WritePKI(in *instance.Instance) error {
	dir := PKIDir(in)
	ca, err := pki.LoadCA(dir)
	if err != nil {
		if ca, err = newCA(dir); err != nil {
			return err
		}
	}
	if err := writeServing(in, ca, dir); err != nil {
		return err
	}
	kc, err := ca.Issue(pki.Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	if err := kc.Write(dir, "apiserver-kubelet-client"); err != nil {
		return err
	}
	sa, err := pki.NewSigningKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), sa.CertPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), sa.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeKubeconfigs(in, ca, dir)
}

func newCA(dir string) (*pki.CA, error) {
	ca, err := pki.NewCA("etcd-operator-sandbox")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Pair()
	if err != nil {
		return nil, err
	}
	return ca, pair.Write(dir, "ca")
}

func writeServing(in *instance.Instance, ca *pki.CA, dir string) error {
	serving, err := ca.Issue(pki.Request{
		CommonName: "kube-apiserver",
		IPs: []net.IP{
			net.IP(in.APIServerIP().AsSlice()), net.IP(in.KubernetesServiceIP().AsSlice()), net.IPv4(127, 0, 0, 1),
		},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		Server: true,
	})
	if err != nil {
		return err
	}
	return serving.Write(dir, "apiserver")
}

func writeKubeconfigs(in *instance.Instance, ca *pki.CA, dir string) error {
	for _, id := range identities {
		pair, err := ca.Issue(pki.Request{CommonName: id.cn, Organization: id.orgs, Client: true})
		if err != nil {
			return err
		}
		if err := pair.Write(dir, id.file); err != nil {
			return err
		}
		cfg := Kubeconfig(in, ca.CertPEM(), pair)
		path := filepath.Join(dir, id.file+".kubeconfig")
		if id.file == "admin" {
			path = in.Kubeconfig()
		}
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
	}
	return nil
}

// Kubeconfig builds a kubeconfig for the sandbox's API server with the
// credentials embedded.
func Kubeconfig(in *instance.Instance, caPEM []byte, cred pki.Pair) *clientcmdapi.Config {
	name := "sandbox-" + in.Name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   "https://" + net.JoinHostPort(in.APIServerIP().String(), "443"),
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cred.CertPEM, ClientKeyData: cred.KeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return cfg
}

// WriteNodeCredentials writes node i's kubelet credentials into dir: a
// client certificate in the system:nodes group (the Node authorizer and the
// NodeRestriction admission plugin then treat it as that node) inside
// kubelet.kubeconfig, and the serving certificate of its kubelet API for the
// node's address.
func WriteNodeCredentials(in *instance.Instance, ca *pki.CA, i int, dir string) error {
	name := instance.NodeName(i)
	client, err := ca.Issue(pki.Request{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}, Client: true})
	if err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*Kubeconfig(in, ca.CertPEM(), client), filepath.Join(dir, "kubelet.kubeconfig")); err != nil {
		return err
	}
	serving, err := ca.Issue(pki.Request{
		CommonName: name, IPs: []net.IP{net.IP(in.NodeIP(i).AsSlice())}, DNSNames: []string{name}, Server: true,
	})
	if err != nil {
		return err
	}
	return serving.Write(dir, "kubelet")
}
