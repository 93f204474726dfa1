package network

import (
	"net/netip"
	"slices"
	"testing"
)

// listing is what nft 1.0.6 prints for `nft -j list set inet sandbox-faults
// cutports` with two Pods cut on some ports.
const listing = `{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
{"set": {"family": "inet", "name": "cutports", "table": "sandbox-faults", "type": ["ipv4_addr", "inet_service"], "handle": 5,
"elem": [{"concat": ["10.1.1.6", 22]}, {"concat": ["10.1.1.5", 2379]}, {"concat": ["10.1.1.5", 2380]}, {"concat": ["10.1.1.6", "http"]}]}}]}`

func TestPortCutsOf(t *testing.T) {
	for _, tc := range []struct {
		name, listing, addr string
		want                []string
		wantErr             bool
	}{
		{name: "only the address's elements", listing: listing, addr: "10.1.1.5", want: []string{"10.1.1.5 . 2379", "10.1.1.5 . 2380"}},
		{name: "service names are kept as nft printed them", listing: listing, addr: "10.1.1.6", want: []string{"10.1.1.6 . 22", "10.1.1.6 . http"}},
		{name: "an address with no cuts", listing: listing, addr: "10.1.1.7"},
		{name: "an empty set has no elem", addr: "10.1.1.5",
			listing: `{"nftables": [{"set": {"family": "inet", "name": "cutports", "table": "sandbox-faults", "type": ["ipv4_addr", "inet_service"], "handle": 5}}]}`},
		{name: "an element that is not a pair", addr: "10.1.1.5", wantErr: true,
			listing: `{"nftables": [{"set": {"name": "cutports", "elem": [{"concat": ["10.1.1.5"]}]}}]}`},
		{name: "not JSON", listing: "table inet sandbox-faults {", addr: "10.1.1.5", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := portCutsOf([]byte(tc.listing), netip.MustParseAddr(tc.addr))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
