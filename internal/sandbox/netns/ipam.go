package netns

import (
	"fmt"
	"net/netip"
)

// Allocator hands out the addresses of one node's Pod CIDR. It is not safe
// for concurrent use; the node serialises calls.
type Allocator struct {
	cidr  netip.Prefix
	byKey map[string]netip.Addr
	inUse map[netip.Addr]bool
	last  netip.Addr // most recently handed out
}

// NewAllocator returns an allocator over cidr. The network and broadcast
// addresses are never handed out.
func NewAllocator(cidr netip.Prefix) *Allocator {
	return &Allocator{cidr: cidr.Masked(), byKey: map[string]netip.Addr{}, inUse: map[netip.Addr]bool{}}
}

// Allocate returns key's address, the same one on every call until Release.
// Addresses are handed out round-robin, so a released one is reused as late
// as possible (other Pods may still have it in their hosts files).
func (a *Allocator) Allocate(key string) (netip.Addr, error) {
	if addr, ok := a.byKey[key]; ok {
		return addr, nil
	}
	first, broadcast := a.cidr.Addr().Next(), lastAddr(a.cidr)
	size := 0
	for addr := first; addr.Less(broadcast); addr = addr.Next() {
		size++
	}
	addr := a.last
	for range size {
		addr = addr.Next()
		if !addr.IsValid() || !addr.Less(broadcast) || addr.Less(first) {
			addr = first
		}
		if !a.inUse[addr] {
			a.inUse[addr] = true
			a.byKey[key] = addr
			a.last = addr
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s", a.cidr)
}

// Release frees key's address.
func (a *Allocator) Release(key string) {
	if addr, ok := a.byKey[key]; ok {
		delete(a.inUse, addr)
		delete(a.byKey, key)
	}
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
