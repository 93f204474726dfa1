package main

import (
	"os"
	"strings"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// clusterDomain is the cluster DNS domain: the flag's value, else the one the
// operator's own Pod resolves names in, else cluster.local.
func clusterDomain(flagValue string) string {
	if flagValue != "" {
		return strings.Trim(flagValue, ".")
	}
	if conf, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		if d := domainFromResolvConf(string(conf)); d != "" {
			return d
		}
	}
	return manifest.DefaultClusterDomain
}

// domainFromResolvConf reads the cluster domain from a Pod's resolv.conf,
// whose search list the kubelet writes as "<namespace>.svc.<domain>
// svc.<domain> <domain>": the domain follows the entry starting "svc.".
// Outside a Pod there is no such entry and the answer is "".
func domainFromResolvConf(conf string) string {
	for line := range strings.Lines(conf) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "search" {
			continue
		}
		for _, d := range fields[1:] {
			if rest, ok := strings.CutPrefix(strings.TrimSuffix(d, "."), "svc."); ok && rest != "" {
				return rest
			}
		}
	}
	return ""
}
