package daemon

import (
	"github.com/seed74754924/etcd-operator/internal/sandbox/controlplane"
	"github.com/seed74754924/etcd-operator/internal/sandbox/instance"
	"github.com/seed74754924/etcd-operator/internal/sandbox/pki"
)

func mustCA(in *instance.Instance) *pki.CA {
	ca, err := controlplane.LoadCA(in)
	if err != nil {
		panic(err) // WritePKI wrote it just before
	}
	return ca
}

// kubeletVersion reports the API server's version as the nodes' own, so
// version skew checks see a matching kubelet.
func (d *Daemon) kubeletVersion() string {
	if v, err := d.client.Discovery().ServerVersion(); err == nil {
		return v.GitVersion
	}
	return "v0.0.0-sandbox"
}
