// Package dns is the sandbox's name service: there is no DNS server, each
// Pod gets its own /etc/hosts listing every name it may look up, kept
// current as Pods, Services and EndpointSlices change.
package dns

import (
	"fmt"
	"slices"
	"strings"
)

// ClusterDomain is the cluster's DNS domain.
const ClusterDomain = "cluster.local"

// PodRecord is a Pod as the hosts files see it.
type PodRecord struct {
	Namespace string
	Name      string
	Hostname  string // spec.hostname, or the Pod's name
	Subdomain string
	IP        string
}

// ServiceRecord is a Service and the addresses its name resolves to.
type ServiceRecord struct {
	Namespace string
	Name      string
	Headless  bool
	IPs       []string
}

// World is everything the hosts files are rendered from.
type World struct {
	Pods        []PodRecord
	Services    []ServiceRecord
	APIServerIP string
}

// names lists a DNS name in its fully qualified form, the `.svc` form,
// the `<x>.<ns>` form (which a real resolver's search path would complete
// from any namespace), and the bare form inside its own namespace.
func names(base, ns, selfNS string) []string {
	out := []string{
		base + "." + ns + ".svc." + ClusterDomain,
		base + "." + ns + ".svc",
		base + "." + ns,
	}
	if ns == selfNS {
		out = append(out, base)
	}
	return out
}

// Render builds the hosts file of self.
func Render(self PodRecord, w World) string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (etcd-operator sandbox): rewritten in place when Pods or Services change.\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if self.IP != "" {
		b.WriteString(self.IP + "\t" + strings.Join(selfNames(self, w), " ") + "\n")
	}
	for _, p := range sortedPods(w.Pods) {
		if p.IP == "" || p.Subdomain == "" || !hasHeadless(w.Services, p.Namespace, p.Subdomain) {
			continue
		}
		if p.Namespace == self.Namespace && p.Name == self.Name {
			continue
		}
		fmt.Fprintf(&b, "%s\t%s\n", p.IP, strings.Join(names(p.Hostname+"."+p.Subdomain, p.Namespace, self.Namespace), " "))
	}
	for _, s := range sortedServices(w.Services) {
		for _, ip := range s.IPs {
			fmt.Fprintf(&b, "%s\t%s\n", ip, strings.Join(names(s.Name, s.Namespace, self.Namespace), " "))
		}
	}
	if w.APIServerIP != "" {
		fmt.Fprintf(&b, "%s\t%s\n", w.APIServerIP, strings.Join(names("kubernetes", "default", self.Namespace), " "))
	}
	return b.String()
}

// selfNames are the Pod's own names, as the kubelet writes them.
func selfNames(self PodRecord, w World) []string {
	if self.Subdomain != "" && hasHeadless(w.Services, self.Namespace, self.Subdomain) {
		return append(names(self.Hostname+"."+self.Subdomain, self.Namespace, self.Namespace), self.Hostname)
	}
	if self.Subdomain != "" {
		return []string{self.Hostname + "." + self.Subdomain + "." + self.Namespace + ".svc." + ClusterDomain, self.Hostname}
	}
	return []string{self.Hostname}
}

func hasHeadless(services []ServiceRecord, ns, name string) bool {
	for _, s := range services {
		if s.Namespace == ns && s.Name == name && s.Headless {
			return true
		}
	}
	return false
}

func sortedPods(pods []PodRecord) []PodRecord {
	out := slices.Clone(pods)
	slices.SortFunc(out, func(a, b PodRecord) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

func sortedServices(svcs []ServiceRecord) []ServiceRecord {
	out := slices.Clone(svcs)
	slices.SortFunc(out, func(a, b ServiceRecord) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}
