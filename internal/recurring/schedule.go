// Package recurring holds the timing and history rules shared by the
// controllers that create one object per tick of a cron schedule (the
// EtcdSnapshotSchedule and EtcdDefragPolicy controllers): reading a
// schedule and its time zone, finding the tick that is due, the starting
// deadline, the concurrency policy, and which finished objects fall out of
// a history limit. Everything here is a pure function of its arguments.
package recurring

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ZoneError says that a schedule's time zone is not a known IANA name.
type ZoneError struct {
	Zone string
	Err  error
}

func (e *ZoneError) Error() string {
	return fmt.Sprintf("%q is not a known time zone: %v", e.Zone, e.Err)
}

// ScheduleError says that a schedule is not a cron expression.
type ScheduleError struct {
	Schedule string
	Err      error
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("%q is not a cron schedule: %v", e.Schedule, e.Err)
}

// Parse reads a cron schedule: five fields or a descriptor such as @daily.
// The schedule runs in zone when zone is set, else in the zone of a
// CRON_TZ= or TZ= prefix of spec, else in UTC (never in the operator's
// local time). It fails with a *ZoneError or a *ScheduleError.
func Parse(spec string, zone *string) (cron.Schedule, error) {
	full := spec
	if zone != nil {
		if _, err := time.LoadLocation(*zone); err != nil {
			return nil, &ZoneError{Zone: *zone, Err: err}
		}
		full = "CRON_TZ=" + *zone + " " + spec
	} else if !strings.Contains(spec, "TZ=") {
		full = "CRON_TZ=UTC " + spec
	}
	s, err := cron.ParseStandard(full)
	if err != nil {
		return nil, &ScheduleError{Schedule: spec, Err: err}
	}
	return s, nil
}

// maxSteps bounds the walk over missed ticks: a schedule idle for longer
// starts the walk closer to now (see Due).
const maxSteps = 1000

// Ticks is where a schedule stands at a moment.
type Ticks struct {
	// Latest is the latest tick in (since, now], zero if none is due.
	Latest time.Time
	// Next is the first tick after now, zero if the schedule never fires
	// again.
	Next time.Time
	// Missed counts the ticks in (since, now]. It is exact up to the walk's
	// bound; past it (a schedule idle for more than a thousand of its
	// intervals) it is a lower bound of about a thousand.
	Missed int
}

// Due finds the ticks of s after since and up to now.
func Due(s cron.Schedule, since, now time.Time) Ticks {
	first := s.Next(since)
	if first.IsZero() || first.After(now) {
		return Ticks{Next: first}
	}
	out := Ticks{Next: s.Next(now)}
	// Ticks far behind: start the walk maxSteps intervals before now,
	// which still lies before the latest tick.
	if step := s.Next(first).Sub(first); step > 0 && now.Sub(first) > maxSteps*step {
		first = s.Next(now.Add(-maxSteps * step))
		out.Missed++ // at least the first tick, skipped by the jump
	}
	for t := first; !t.IsZero() && !t.After(now); t = s.Next(t) {
		out.Latest = t
		out.Missed++
	}
	return out
}

// TooLate reports whether a tick is missed by more than the starting
// deadline (unset: no deadline).
func TooLate(tick, now time.Time, deadlineSeconds *int64) bool {
	return deadlineSeconds != nil && now.Sub(tick) > time.Duration(*deadlineSeconds)*time.Second
}
