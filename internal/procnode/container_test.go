//go:build linux

package procnode

import "testing"

func TestBindToPodIP(t *testing.T) {
	for in, want := range map[string]string{
		"--listen-peer-urls=http://0.0.0.0:2380":  "--listen-peer-urls=http://10.244.0.9:2380",
		"--listen-client-urls=https://[::]:2379":  "--listen-client-urls=https://10.244.0.9:2379",
		"--health-probe-bind-address=:8081":       "--health-probe-bind-address=10.244.0.9:8081",
		":8080":                                   "10.244.0.9:8080",
		"--advertise-client-urls=http://a.b:2379": "--advertise-client-urls=http://a.b:2379",
		"--metrics-bind-address=0":                "--metrics-bind-address=0",
	} {
		if got := bindToPodIP(in, "10.244.0.9"); got != want {
			t.Errorf("bindToPodIP(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "x": "x"} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
