package version

import (
	"strings"
	"testing"
)

func vs(t *testing.T, ss ...string) []Version {
	t.Helper()
	var out []Version
	for _, s := range ss {
		v, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name    string
		running []string
		cluster string
		target  string
		want    Kind
		refused string // a part of the refusal, "" when allowed
	}{
		{"nothing to do", []string{"3.6.16", "3.6.16"}, "3.6", "3.6.16", Same, ""},
		{"patch up", []string{"3.6.15", "3.6.15"}, "3.6", "3.6.16", Patch, ""},
		{"patch down", []string{"3.6.16", "3.6.16"}, "3.6", "3.6.15", Patch, ""},
		{"minor up from an accepted patch", []string{"3.5.35", "3.5.35"}, "3.5", "3.6.16", MinorUp, ""},
		{"minor up from the oldest accepted patch", []string{"3.5.26"}, "3.5", "3.6.16", MinorUp, ""},
		{"minor up from a patch the guide does not accept", []string{"3.5.20", "3.5.35"}, "3.5", "3.6.16", 0, "3.5.26 or later"},
		{"3.6 to 3.7 from an accepted patch", []string{"3.6.16"}, "3.6", "3.7.3", MinorUp, ""},
		{"3.6 to 3.7 from too old a patch", []string{"3.6.10"}, "3.6", "3.7.3", 0, "3.6.11 or later"},
		{"a minor up half done goes on", []string{"3.5.35", "3.6.16"}, "3.5", "3.6.16", MinorUp, ""},
		{"a minor up half done goes back", []string{"3.5.35", "3.6.16"}, "3.5", "3.5.35", Patch, ""},
		{"skipping a minor up", []string{"3.5.35"}, "3.5", "3.7.3", 0, "skips a minor"},
		{"minor down through the downgrade API", []string{"3.7.3", "3.7.3"}, "3.7", "3.6.16", MinorDown, ""},
		{"minor down from 3.6", []string{"3.6.16"}, "3.6", "3.5.35", MinorDown, ""},
		{"a downgrade enabled: the cluster version moved down, the members roll", []string{"3.7.3", "3.6.16"}, "3.6", "3.6.16", Patch, ""},
		{"minor down from 3.5 has no downgrade API", []string{"3.5.35"}, "3.5", "3.4.30", 0, "downgrade API"},
		{"skipping a minor down", []string{"3.7.3"}, "3.7", "3.5.35", 0, "skips a minor"},
		{"major", []string{"3.6.16"}, "3.6", "4.0.0", 0, "major"},
		{"cluster version unknown, minor up judged from the members", []string{"3.5.35"}, "", "3.6.16", MinorUp, ""},
		{"cluster version unknown, no minor down", []string{"3.7.3"}, "", "3.6.16", 0, "cluster version is not known"},
	}
	for _, c := range cases {
		target, err := Parse(c.target)
		if err != nil {
			t.Fatal(err)
		}
		got := Decide(vs(t, c.running...), c.cluster, target)
		switch {
		case c.refused != "" && !strings.Contains(got.Refused, c.refused):
			t.Errorf("%s: %+v, want a refusal saying %q", c.name, got, c.refused)
		case c.refused == "" && (got.Refused != "" || got.Kind != c.want):
			t.Errorf("%s: %+v, want kind %d allowed", c.name, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"3.6", "3.6.x", "v3", "", "3.6.-1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if v, err := Parse("v3.6.16"); err != nil || v != (Version{3, 6, 16}) || v.MinorString() != "3.6" {
		t.Errorf("Parse(v3.6.16) = %v, %v", v, err)
	}
}
