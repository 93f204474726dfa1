package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestTheManagerKeepsNoAgentMemoryLimit: the agents collect garbage early
// (a 48 MiB soft limit), but the manager must not inherit that. Its heap
// grows with the clusters and namespaces it watches; under the agents'
// limit it collected garbage continuously once past it (2.6 cycles a
// second and about 90 millicores at rest, watching 40 namespaces).
func TestTheManagerKeepsNoAgentMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	for _, args := range [][]string{{"--leader-elect", "--metrics-bind-address=:8443"}, {"--zap-log-level=debug"}, {}} {
		if code, ok := runAgent(args); ok || code != 0 {
			t.Fatalf("runAgent(%q) = %d, %v: the manager's arguments name no agent", args, code, ok)
		}
		if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
			t.Errorf("after the manager's arguments %q the memory limit is %d, want none", args, limit)
		}
	}
}
