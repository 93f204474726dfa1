package recurring

import (
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/utils/ptr"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func mustParse(t *testing.T, spec string, zone *string) cron.Schedule {
	t.Helper()
	s, err := Parse(spec, zone)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The zone a schedule runs in: UTC unless a zone or a prefix names one.
func TestParseTimeZones(t *testing.T) {
	const from = "2026-12-01T10:00:00Z"
	for _, tc := range []struct {
		name, spec string
		zone       *string
		wantNext   string
	}{
		{"UTC by default", "0 3 * * *", nil, "2026-12-02T03:00:00Z"},
		{"CRON_TZ prefix", "CRON_TZ=Europe/Berlin 0 3 * * *", nil, "2026-12-02T02:00:00Z"},
		{"TZ prefix", "TZ=America/New_York 0 3 * * *", nil, "2026-12-02T08:00:00Z"},
		{"zone field", "0 3 * * *", ptr.To("Asia/Tokyo"), "2026-12-01T18:00:00Z"},
		{"descriptor", "@daily", nil, "2026-12-02T00:00:00Z"},
		{"descriptor in a zone", "CRON_TZ=Europe/Berlin @daily", nil, "2026-12-01T23:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := mustParse(t, tc.spec, tc.zone).Next(at(from))
			if !next.Equal(at(tc.wantNext)) {
				t.Errorf("next %s, want %s", next.UTC(), tc.wantNext)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	var zoneErr *ZoneError
	var schedErr *ScheduleError
	for _, tc := range []struct {
		name, spec string
		zone       *string
		want       any
	}{
		{"minute out of range", "61 * * * *", nil, &schedErr},
		{"four fields", "0 * * *", nil, &schedErr},
		{"words", "every hour", nil, &schedErr},
		{"unknown zone in the prefix", "CRON_TZ=Mars/Olympus 0 * * * *", nil, &schedErr},
		{"unknown zone field", "0 * * * *", ptr.To("Mars/Olympus"), &zoneErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.spec, tc.zone)
			if err == nil || !errors.As(err, tc.want) {
				t.Errorf("error %v (%T), want %T", err, err, tc.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	every, hourly := mustParse(t, "* * * * *", nil), mustParse(t, "0 * * * *", nil)
	weekdays := mustParse(t, "0 9 * * 1-5", nil)
	for _, tc := range []struct {
		name               string
		s                  cron.Schedule
		since, now         string
		wantLatest, wantAt string
		wantMissed         int
	}{
		{"none due yet", every, "2026-12-01T10:00:30Z", "2026-12-01T10:00:59Z", "", "2026-12-01T10:01:00Z", 0},
		{"one due", every, "2026-12-01T10:00:30Z", "2026-12-01T10:01:10Z", "2026-12-01T10:01:00Z", "2026-12-01T10:02:00Z", 1},
		{"several missed: the latest", every, "2026-12-01T10:00:00Z", "2026-12-01T10:07:40Z", "2026-12-01T10:07:00Z", "2026-12-01T10:08:00Z", 7},
		{"exactly at a tick", hourly, "2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z", "2026-12-01T11:00:00Z", "2026-12-01T12:00:00Z", 1},
		{"a year behind", every, "2025-12-01T10:00:00Z", "2026-12-01T10:07:40Z", "2026-12-01T10:07:00Z", "2026-12-01T10:08:00Z", -1},
		{"over a weekend", weekdays, "2026-12-04T09:00:00Z", "2026-12-07T12:00:00Z", "2026-12-07T09:00:00Z", "2026-12-08T09:00:00Z", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := Due(tc.s, at(tc.since), at(tc.now))
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
			latest := ""
			if !got.Latest.IsZero() {
				latest = got.Latest.UTC().Format(time.RFC3339)
			}
			if latest != tc.wantLatest || !got.Next.Equal(at(tc.wantAt)) {
				t.Errorf("latest %q next %s, want %q %s", latest, got.Next, tc.wantLatest, tc.wantAt)
			}
			// -1: a long backlog, counted only as "many".
			if (tc.wantMissed >= 0 && got.Missed != tc.wantMissed) || (tc.wantMissed < 0 && got.Missed <= 100) {
				t.Errorf("missed %d, want %d", got.Missed, tc.wantMissed)
			}
		})
	}
}
