package recurring

import (
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

func TestDecide(t *testing.T) {
	every := mustParse(t, "* * * * *", nil)
	since := at("2026-12-01T10:00:30Z")
	for _, tc := range []struct {
		name     string
		now      string
		active   int
		rules    Rules
		want     Action
		wantTick string
	}{
		{"nothing due", "2026-12-01T10:00:50Z", 0, Rules{}, Idle, ""},
		{"due", "2026-12-01T10:01:05Z", 0, Rules{}, Run, "2026-12-01T10:01:00Z"},
		{"the latest of several", "2026-12-01T10:04:05Z", 0, Rules{}, Run, "2026-12-01T10:04:00Z"},
		{"within the deadline", "2026-12-01T10:01:20Z", 0, Rules{StartingDeadlineSeconds: ptr.To[int64](20)}, Run, "2026-12-01T10:01:00Z"},
		{"past the deadline", "2026-12-01T10:01:21Z", 0, Rules{StartingDeadlineSeconds: ptr.To[int64](20)}, SkipLate, "2026-12-01T10:01:00Z"},
		{"busy, wait", "2026-12-01T10:01:05Z", 1, Rules{Concurrency: Wait}, Hold, "2026-12-01T10:01:00Z"},
		{"busy, forbid", "2026-12-01T10:01:05Z", 1, Rules{Concurrency: Forbid}, SkipBusy, "2026-12-01T10:01:00Z"},
		{"busy, allow", "2026-12-01T10:01:05Z", 1, Rules{Concurrency: Allow}, Run, "2026-12-01T10:01:00Z"},
		{"late beats busy", "2026-12-01T10:01:50Z", 1, Rules{Concurrency: Forbid, StartingDeadlineSeconds: ptr.To[int64](10)}, SkipLate, "2026-12-01T10:01:00Z"},
		{"100 missed: the latest", "2026-12-01T11:40:05Z", 0, Rules{CollapseAfter: 100}, Run, "2026-12-01T11:40:00Z"},
		{"101 missed: now", "2026-12-01T11:41:05Z", 0, Rules{CollapseAfter: 100}, Run, "2026-12-01T11:41:05Z"},
		{"collapsed to now, to the second", "2026-12-01T11:41:05.7Z", 0, Rules{CollapseAfter: 100}, Run, "2026-12-01T11:41:05Z"},
		{"collapsed to now is never late", "2026-12-01T11:41:05Z", 0, Rules{CollapseAfter: 100, StartingDeadlineSeconds: ptr.To[int64](0)}, Run, "2026-12-01T11:41:05Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at(tc.now)
			p := Decide(every, since, now, tc.active, tc.rules)
			tick := ""
			if !p.Tick.IsZero() {
				tick = p.Tick.UTC().Format(time.RFC3339)
			}
			if p.Action != tc.want || tick != tc.wantTick {
				t.Errorf("%s at %q, want %s at %q", p.Action, tick, tc.want, tc.wantTick)
			}
			if next := now.Truncate(time.Minute).Add(time.Minute); !p.Next.Equal(next) {
				t.Errorf("next %s, want %s", p.Next, next)
			}
			if d := p.RequeueAfter(now); d < time.Second || d > 61*time.Second {
				t.Errorf("requeue after %s", d)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	type run struct {
		name string
		at   time.Time
	}
	base := at("2026-12-01T10:00:00Z")
	runs := []run{{"b", base.Add(2 * time.Hour)}, {"a", base.Add(time.Hour)}, {"d", base.Add(4 * time.Hour)}, {"c", base.Add(3 * time.Hour)}}
	byTime := func(r run) time.Time { return r.at }
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{0, []string{"d", "c", "b", "a"}},
		{1, []string{"c", "b", "a"}},
		{3, []string{"a"}},
		{4, nil},
		{9, nil},
	} {
		var got []string
		for _, r := range Expired(runs, tc.limit, byTime) {
			got = append(got, r.name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("limit %d: expired %v, want %v", tc.limit, got, tc.want)
		}
	}
}
