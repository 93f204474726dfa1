package network

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
)

// faultTable is the sandbox's own nftables table inside its namespace. Its
// sets hold what is cut off, and whatever matches them, forwarded (between
// Pods, nodes and the host; bridged traffic too, through br_netfilter) or
// from or to the namespace itself (the kubelets' probes, the API server), is
// dropped without an answer, as with a pulled cable:
//
//   - cut holds addresses and subnets that lose all their traffic;
//   - cutports holds (Pod IP . port) pairs: every TCP segment with that Pod at
//     one end and that port at either end is dropped, so the Pod neither
//     answers on the port nor reaches the port of anyone else. An etcd member
//     cut on 2380 loses its peers both ways, as it both listens on 2380 and
//     dials its peers' 2380.
//
// The input chain only sees packets from the Pods to the namespace, and the
// output chain only packets from the namespace to them, so each matches on
// the Pod's side of the packet alone.
const (
	faultTable   = "sandbox-faults"
	cutSet       = "cut"
	cutPortsSet  = "cutports"
	faultsScript = `table inet ` + faultTable + ` {
	set ` + cutSet + ` { type ipv4_addr; flags interval; }
	set ` + cutPortsSet + ` { type ipv4_addr . inet_service; }
	chain forward {
		type filter hook forward priority filter - 10;
		ip saddr @cut drop; ip daddr @cut drop;
		ip saddr . tcp sport @cutports drop; ip saddr . tcp dport @cutports drop;
		ip daddr . tcp sport @cutports drop; ip daddr . tcp dport @cutports drop;
	}
	chain input {
		type filter hook input priority filter - 10;
		ip saddr @cut drop;
		ip saddr . tcp sport @cutports drop; ip saddr . tcp dport @cutports drop;
	}
	chain output {
		type filter hook output priority filter - 10;
		ip daddr @cut drop;
		ip daddr . tcp sport @cutports drop; ip daddr . tcp dport @cutports drop;
	}
}
`
)

// portCutsMu keeps one Pod's heal (a listing, then a deletion) from racing
// another change of the port cuts.
var portCutsMu sync.Mutex

// SetupFaults creates the fault table. It runs inside the namespace.
func SetupFaults(ctx context.Context) error {
	return nft(ctx, faultsScript)
}

// Cut drops all traffic to and from p (one Pod IP, or a node's Pod subnet).
func Cut(ctx context.Context, p netip.Prefix) error {
	return nft(ctx, fmt.Sprintf("add element inet %s %s { %s }\n", faultTable, cutSet, p.Masked()))
}

// Restore lets p's traffic through again; restoring what is not cut is fine
// (nft says "element does not exist" for it in an interval set, and "No such
// file or directory" elsewhere).
func Restore(ctx context.Context, p netip.Prefix) error {
	err := nft(ctx, fmt.Sprintf("delete element inet %s %s { %s }\n", faultTable, cutSet, p.Masked()))
	if err != nil && (noSuchObject(err) || strings.Contains(err.Error(), "element does not exist")) {
		return nil
	}
	return err
}

// CutPorts drops the TCP traffic of addr on each of ports, in both
// directions and whichever end listens. Cutting a port twice is fine.
func CutPorts(ctx context.Context, addr netip.Addr, ports []int) error {
	if len(ports) == 0 {
		return fmt.Errorf("no ports to cut for %s", addr)
	}
	elems := make([]string, 0, len(ports))
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("port %d is out of range 1-65535", p)
		}
		elems = append(elems, fmt.Sprintf("%s . %d", addr, p))
	}
	portCutsMu.Lock()
	defer portCutsMu.Unlock()
	err := nft(ctx, fmt.Sprintf("add element inet %s %s { %s }\n", faultTable, cutPortsSet, strings.Join(elems, ", ")))
	return explainMissingSet(err)
}

// RestorePorts removes every port cut of addr; an address with none is fine.
func RestorePorts(ctx context.Context, addr netip.Addr) error {
	portCutsMu.Lock()
	defer portCutsMu.Unlock()
	listing, err := nftOutput(ctx, "-j", "list", "set", "inet", faultTable, cutPortsSet)
	if err != nil {
		return explainMissingSet(err)
	}
	elems, err := portCutsOf(listing, addr)
	if err != nil || len(elems) == 0 {
		return err
	}
	return nft(ctx, fmt.Sprintf("delete element inet %s %s { %s }\n", faultTable, cutPortsSet, strings.Join(elems, ", ")))
}

// nftSetListing is the part of `nft -j list set` that RestorePorts reads.
type nftSetListing struct {
	Nftables []struct {
		Set *struct {
			Name string `json:"name"`
			Elem []struct {
				Concat []any `json:"concat"`
			} `json:"elem"`
		} `json:"set"`
	} `json:"nftables"`
}

// portCutsOf returns the elements of the cutports set, as nft takes them
// back, whose address is addr.
func portCutsOf(listing []byte, addr netip.Addr) ([]string, error) {
	var l nftSetListing
	dec := json.NewDecoder(bytes.NewReader(listing))
	dec.UseNumber()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("reading nft's listing of %s: %w", cutPortsSet, err)
	}
	var out []string
	for _, obj := range l.Nftables {
		if obj.Set == nil || obj.Set.Name != cutPortsSet {
			continue
		}
		for _, e := range obj.Set.Elem {
			if len(e.Concat) != 2 {
				return nil, fmt.Errorf("unexpected element %v in nft's listing of %s", e.Concat, cutPortsSet)
			}
			// The port is a number, or a service name if nft was told to
			// print names; nft takes either back.
			if a, err := netip.ParseAddr(fmt.Sprint(e.Concat[0])); err == nil && a == addr {
				out = append(out, fmt.Sprintf("%s . %v", a, e.Concat[1]))
			}
		}
	}
	return out, nil
}

// explainMissingSet turns nft's bare "No such file or directory" about the
// port set into what happened: the table was made by a build of the sandbox
// from before port cuts.
func explainMissingSet(err error) error {
	if err != nil && noSuchObject(err) {
		return fmt.Errorf("the sandbox's nftables table %s has no set %s (made by an older build of the sandbox; restart it with this one): %w",
			faultTable, cutPortsSet, err)
	}
	return err
}

func noSuchObject(err error) bool { return strings.Contains(err.Error(), "No such file or directory") }

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

// nftOutput runs nft with args and returns what it prints.
func nftOutput(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "nft", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
