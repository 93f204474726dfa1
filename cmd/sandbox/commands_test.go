package main

import (
	"errors"
	"slices"
	"testing"
)

func TestPortsFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []int
		wantErr bool
	}{
		{args: []string{"2380"}, want: []int{2380}},
		{args: []string{"2380,2379"}, want: []int{2380, 2379}},
		{args: []string{"2380", "2379,2380"}, want: []int{2380, 2379}},
		{args: []string{"2380,"}, wantErr: true},
		{args: []string{"0"}, wantErr: true},
		{args: []string{"65536"}, wantErr: true},
		{args: []string{"peer"}, wantErr: true},
	} {
		var p portList
		var err error
		for _, v := range tc.args {
			if err = p.Set(v); err != nil {
				break
			}
		}
		if (err != nil) != tc.wantErr || (!tc.wantErr && !slices.Equal(p, tc.want)) {
			t.Errorf("Set(%v) = %v, %v; want %v, error %v", tc.args, p, err, tc.want, tc.wantErr)
		}
	}
}

// TestPortsOnlyForPartition: --ports with another fault is a usage error,
// found before the sandbox is looked for.
func TestPortsOnlyForPartition(t *testing.T) {
	err := fault(t.Context(), []string{"kill", "ns/pod", "--ports", "2380", "--dir", t.TempDir()})
	if !errors.As(err, new(usageError)) {
		t.Errorf("fault kill --ports: %v, want a usage error", err)
	}
}
