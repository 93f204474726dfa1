package main

import (
	"slices"
	"testing"
)

func TestAddonsFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		wantErr bool
	}{
		{args: []string{"cert-manager"}, want: []string{"cert-manager"}},
		{args: []string{"cert-manager", "cert-manager"}, want: []string{"cert-manager"}},
		{args: []string{"cert-manager,cert-manager"}, want: []string{"cert-manager"}},
		{args: []string{"prometheus,cert-manager"}, want: []string{"prometheus", "cert-manager"}},
		{args: []string{"istio"}, wantErr: true},
	} {
		var a addons
		var err error
		for _, v := range tc.args {
			if err = a.Set(v); err != nil {
				break
			}
		}
		if (err != nil) != tc.wantErr || (!tc.wantErr && !slices.Equal(a, tc.want)) {
			t.Errorf("Set(%v) = %v, %v; want %v, error %v", tc.args, a, err, tc.want, tc.wantErr)
		}
	}
}

// TestAddonsHaveInstallers: every add-on the flag accepts can be installed.
func TestAddonsHaveInstallers(t *testing.T) {
	for _, name := range knownAddons {
		if addonInstallers[name] == nil {
			t.Errorf("add-on %q has no installer", name)
		}
	}
}
