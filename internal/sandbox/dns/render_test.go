package dns

import (
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	world := World{
		APIServerIP: "10.5.0.1",
		Pods: []PodRecord{
			{Namespace: "a", Name: "etcd-0", Hostname: "etcd-0", Subdomain: "etcd", IP: "10.5.1.2"},
			{Namespace: "a", Name: "etcd-1", Hostname: "etcd-1", Subdomain: "etcd", IP: "10.5.2.2"},
			{Namespace: "a", Name: "no-ip", Hostname: "no-ip", Subdomain: "etcd"},
			{Namespace: "a", Name: "no-svc", Hostname: "x", Subdomain: "missing", IP: "10.5.2.9"},
			{Namespace: "b", Name: "other", Hostname: "o", Subdomain: "peers", IP: "10.5.3.3"},
		},
		Services: []ServiceRecord{
			{Namespace: "a", Name: "etcd", Headless: true, IPs: []string{"10.5.1.2"}},
			{Namespace: "a", Name: "client", IPs: []string{"10.5.1.2", "10.5.2.2"}},
			{Namespace: "b", Name: "peers", Headless: true},
		},
	}
	tests := []struct {
		name    string
		self    PodRecord
		want    []string
		notWant []string
	}{
		{
			name: "member sees itself and its peers with every form",
			self: world.Pods[0],
			want: []string{
				"10.5.1.2\tetcd-0.etcd.a.svc.cluster.local etcd-0.etcd.a.svc etcd-0.etcd.a etcd-0.etcd etcd-0\n",
				"10.5.2.2\tetcd-1.etcd.a.svc.cluster.local etcd-1.etcd.a.svc etcd-1.etcd.a etcd-1.etcd\n",
				"10.5.1.2\tclient.a.svc.cluster.local client.a.svc client.a client\n",
				"10.5.2.2\tclient.a.svc.cluster.local client.a.svc client.a client\n",
				"10.5.1.2\tetcd.a.svc.cluster.local etcd.a.svc etcd.a etcd\n",
				"10.5.0.1\tkubernetes.default.svc.cluster.local kubernetes.default.svc kubernetes.default\n",
				"10.5.3.3\to.peers.b.svc.cluster.local o.peers.b.svc o.peers.b\n",
				"127.0.0.1\tlocalhost\n",
			},
			notWant: []string{"no-ip", "x.missing", "o.peers\n", "etcd-0.etcd.a.svc.cluster.local etcd-0.etcd.a.svc etcd-0.etcd.a etcd-0.etcd\n"},
		},
		{
			name: "pod in default namespace gets the short kubernetes name",
			self: PodRecord{Namespace: "default", Name: "p", Hostname: "p", IP: "10.5.1.7"},
			want: []string{
				"10.5.1.7\tp\n",
				"10.5.0.1\tkubernetes.default.svc.cluster.local kubernetes.default.svc kubernetes.default kubernetes\n",
				"10.5.2.2\tetcd-1.etcd.a.svc.cluster.local etcd-1.etcd.a.svc etcd-1.etcd.a\n",
			},
			notWant: []string{"client\n", "etcd-1.etcd\n"},
		},
		{
			name:    "subdomain without a headless service",
			self:    world.Pods[3],
			want:    []string{"10.5.2.9\tx.missing.a.svc.cluster.local x\n"},
			notWant: []string{"x.missing.a.svc x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Render(tt.self, world)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, nw := range tt.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("unexpected %q in:\n%s", nw, got)
				}
			}
		})
	}
}
