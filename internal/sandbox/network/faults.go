package network

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// faultTable is the sandbox's own nftables table inside its namespace. Its
// sets hold the addresses and subnets that are cut off: whatever is sent to
// or from them, forwarded (between Pods, nodes and the host; bridged traffic
// too, through br_netfilter) or from the namespace itself (the kubelets'
// probes, the API server), is dropped without an answer, as with a pulled
// cable.
const faultTable = "sandbox-faults"

// SetupFaults creates the fault table. It runs inside the namespace.
func SetupFaults(ctx context.Context) error {
	rules := `table inet ` + faultTable + ` {
	set cut { type ipv4_addr; flags interval; }
	chain forward { type filter hook forward priority filter - 10; ip saddr @cut drop; ip daddr @cut drop; }
	chain input { type filter hook input priority filter - 10; ip saddr @cut drop; }
	chain output { type filter hook output priority filter - 10; ip daddr @cut drop; }
}
`
	return nft(ctx, rules)
}

// Cut drops all traffic to and from p (one Pod IP, or a node's Pod subnet).
func Cut(ctx context.Context, p netip.Prefix) error {
	return nft(ctx, fmt.Sprintf("add element inet %s cut { %s }\n", faultTable, p.Masked()))
}

// Restore lets p's traffic through again; restoring what is not cut is fine.
func Restore(ctx context.Context, p netip.Prefix) error {
	err := nft(ctx, fmt.Sprintf("delete element inet %s cut { %s }\n", faultTable, p.Masked()))
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil
	}
	return err
}

// nft feeds a script to nft.
func nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
