package netns

import (
	"net/netip"
	"testing"
)

func TestAllocator(t *testing.T) {
	tests := []struct {
		name    string
		cidr    string
		ops     []string // "+key" allocates, "-key" releases
		want    map[string]string
		wantErr string // the key whose allocation must fail
	}{
		{name: "first host address first", cidr: "10.9.1.0/24", ops: []string{"+a"}, want: map[string]string{"a": "10.9.1.1"}},
		{name: "stable per key", cidr: "10.9.1.0/24", ops: []string{"+a", "+b", "+a"}, want: map[string]string{"a": "10.9.1.1", "b": "10.9.1.2"}},
		{name: "released address reused last", cidr: "10.9.1.0/24", ops: []string{"+a", "+b", "-a", "+c"}, want: map[string]string{"b": "10.9.1.2", "c": "10.9.1.3"}},
		{name: "wraps around to freed addresses", cidr: "10.9.1.0/29", ops: []string{"+a", "+b", "+c", "+d", "+e", "+f", "-b", "+g"}, want: map[string]string{"a": "10.9.1.1", "c": "10.9.1.3", "d": "10.9.1.4", "e": "10.9.1.5", "f": "10.9.1.6", "g": "10.9.1.2"}},
		{name: "broadcast never used", cidr: "10.9.1.0/30", ops: []string{"+a", "+b", "+c"}, want: map[string]string{"a": "10.9.1.1", "b": "10.9.1.2"}, wantErr: "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := applyOps(t, NewAllocator(netip.MustParsePrefix(tt.cidr)), tt.ops, tt.wantErr)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: got %s, want %s", k, got[k], v)
				}
			}
		})
	}
}

// applyOps runs "+key" (allocate) and "-key" (release) operations and
// returns the addresses held at the end; failKey's allocation must fail.
func applyOps(t *testing.T, a *Allocator, ops []string, failKey string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, op := range ops {
		key := op[1:]
		if op[0] == '-' {
			a.Release(key)
			delete(got, key)
			continue
		}
		addr, err := a.Allocate(key)
		switch {
		case key == failKey && err == nil:
			t.Fatalf("allocating %s: want an error, got %s", key, addr)
		case key == failKey:
		case err != nil:
			t.Fatalf("allocating %s: %v", key, err)
		default:
			got[key] = addr.String()
		}
	}
	return got
}
