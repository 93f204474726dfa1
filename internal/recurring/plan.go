package recurring

import (
	"cmp"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
)

// Concurrency says what a due tick does while an object made for an
// earlier tick is still running.
type Concurrency string

const (
	// Wait holds the tick until the running object finishes, then runs it
	// (unless the starting deadline has passed by then).
	Wait Concurrency = "Wait"
	// Forbid skips the tick: it is used up and nothing is made for it.
	Forbid Concurrency = "Forbid"
	// Allow makes the object anyway.
	Allow Concurrency = "Allow"
)

// Action is what a pass does about the schedule.
type Action string

const (
	// Idle: no tick is due.
	Idle Action = "Idle"
	// Run: make the object of Plan.Tick.
	Run Action = "Run"
	// SkipLate: the due tick was missed by more than the starting deadline.
	SkipLate Action = "SkipLate"
	// SkipBusy: the due tick is skipped because an object still runs
	// (Forbid).
	SkipBusy Action = "SkipBusy"
	// Hold: the due tick waits for the running object (Wait).
	Hold Action = "Hold"
)

// Rules are a schedule's settings that shape the plan.
type Rules struct {
	// StartingDeadlineSeconds: a tick missed by more than this is skipped.
	StartingDeadlineSeconds *int64
	// Concurrency with a running object.
	Concurrency Concurrency
	// CollapseAfter: when more than this many ticks were missed, one run
	// is made for now instead of for the latest tick. Zero never collapses.
	CollapseAfter int
}

// Plan is the decision of one pass.
type Plan struct {
	Action Action
	// Tick is the due tick the action is about (zero when Idle).
	Tick time.Time
	// Next is the first tick after now, zero if the schedule never fires
	// again.
	Next time.Time
	// Collapsed: the backlog was longer than Rules.CollapseAfter, so Tick
	// is now, to the second (all an API timestamp keeps).
	Collapsed bool
}

// Decide plans a pass at now for a schedule whose last handled tick is
// since, with active objects still running.
func Decide(s cron.Schedule, since, now time.Time, active int, rules Rules) Plan {
	t := Due(s, since, now)
	p := Plan{Action: Idle, Next: t.Next}
	if t.Latest.IsZero() {
		return p
	}
	p.Tick = t.Latest
	if rules.CollapseAfter > 0 && t.Missed > rules.CollapseAfter {
		p.Tick, p.Collapsed = now.Truncate(time.Second), true
	}
	switch {
	case TooLate(p.Tick, now, rules.StartingDeadlineSeconds):
		p.Action = SkipLate
	case active > 0 && rules.Concurrency == Forbid:
		p.Action = SkipBusy
	case active > 0 && rules.Concurrency != Allow:
		p.Action = Hold
	default:
		p.Action = Run
	}
	return p
}

// RequeueAfter is how long until the next tick, a second past it so that
// the tick is due when the pass runs; zero when there is no next tick.
func (p Plan) RequeueAfter(now time.Time) time.Duration {
	if p.Next.IsZero() {
		return 0
	}
	return max(p.Next.Sub(now)+time.Second, time.Second)
}

// Expired returns the objects beyond the newest limit of them, newest
// first by at, where ties keep their order in finished.
func Expired[T any](finished []T, limit int, at func(T) time.Time) []T {
	sorted := slices.Clone(finished)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(at(b).UnixNano(), at(a).UnixNano()) })
	if limit < 0 {
		limit = 0
	}
	if len(sorted) <= limit {
		return nil
	}
	return sorted[limit:]
}
