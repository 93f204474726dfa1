package main

import "testing"

func TestDomainFromResolvConf(t *testing.T) {
	cases := map[string]string{
		"search etcd-system.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n": "cluster.local",
		"nameserver 10.0.0.10\nsearch ns.svc.corp.example svc.corp.example corp.example example.com\n":                   "corp.example",
		"search ns.svc.cluster.local. svc.cluster.local. cluster.local.\n":                                               "cluster.local",
		// Outside a Pod: no svc.<domain> entry.
		"search example.com\nnameserver 1.1.1.1\n": "",
		"":                     "",
		"search svc.\n":        "",
		"# search svc.wrong\n": "",
		"searchx svc.wrong\n":  "",
	}
	for conf, want := range cases {
		if got := domainFromResolvConf(conf); got != want {
			t.Errorf("domainFromResolvConf(%q) = %q, want %q", conf, got, want)
		}
	}
}

func TestClusterDomainFlagWins(t *testing.T) {
	if got := clusterDomain("corp.example."); got != "corp.example" {
		t.Errorf("clusterDomain = %q", got)
	}
}
