package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// summary is what summary.json holds and summary.txt shows.
type summary struct {
	// Started is when `make test` started; zero if the tiers were run on
	// their own.
	Started         time.Time  `json:"started,omitzero"`
	Tiers           []tierTime `json:"tiers"`
	TotalSeconds    float64    `json:"totalSeconds"`
	TestCount       int        `json:"testCount"`
	SubtestCount    int        `json:"subtestCount"`
	SlowestTests    []testTime `json:"slowestTests"`
	SlowestSubtests []testTime `json:"slowestSubtests"`
	Failures        []failure  `json:"failures"`

	module string // trimmed from package paths in the text
}

// tierTime is one tier's time and result.
type tierTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// TimedBy is "make" when Seconds is the wall time of the tier's make
	// targets in `make test`, "events" when it is the span of the events of
	// a tier run on its own (go test's time, without make's other work).
	TimedBy string `json:"timedBy"`
	Result  string `json:"result"` // passed, failed, running or not run
	Steps   []step `json:"steps,omitempty"`
	Tests   int    `json:"tests"` // top-level tests run
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
}

// summarize reads the step times and every tier's events in dir.
func summarize(dir string, top, subtests int) (*summary, error) {
	rec, err := readSteps(dir)
	if err != nil {
		return nil, err
	}
	events, order, err := readTiers(dir)
	if err != nil {
		return nil, err
	}
	sum := &summary{module: modulePath("go.mod"), Failures: []failure{}}
	var planned []step
	if rec != nil {
		sum.Started, planned = rec.Started, rec.Steps
	}
	var all []testTime
	for _, name := range tierOrder(planned, order) {
		te := events[name]
		t := tierOf(name, planned, te)
		sum.Tiers = append(sum.Tiers, t)
		if t.Result != notRun && t.TimedBy == "events" {
			sum.TotalSeconds += t.Seconds
		}
		var failures []failure
		if te != nil {
			all = append(all, te.tests...)
			failures = te.failures(name)
		}
		if len(failures) == 0 {
			failures = stepFailures(t)
		}
		sum.Failures = append(sum.Failures, failures...)
	}
	sum.TotalSeconds += stepsWallTime(sum.Tiers)
	sum.SlowestTests, sum.TestCount = slowest(all, top, true)
	sum.SlowestSubtests, sum.SubtestCount = slowest(all, subtests, false)
	return sum, nil
}

// stepFailures lists a tier's failed steps, with what each said last: a
// tier whose make failed without a failing test (a build, a recipe, a
// timeout of make's own).
func stepFailures(t tierTime) []failure {
	var out []failure
	for _, s := range t.Steps {
		if s.State == failed {
			out = append(out, failure{Tier: t.Name, Test: "make " + s.Target, What: fmt.Sprintf("exit %d", s.Exit), Said: s.Said})
		}
	}
	return out
}

// stepsWallTime is the wall time of the steps of the tiers timed by make:
// the union of their spans, since steps may run at the same time.
func stepsWallTime(tiers []tierTime) float64 {
	var spans []span
	for _, t := range tiers {
		if t.TimedBy == "make" {
			spans = append(spans, stepSpans(t)...)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	total := time.Duration(0)
	var cur span
	for i, sp := range spans {
		switch {
		case i == 0:
			cur = sp
		case !sp.from.After(cur.to):
			if sp.to.After(cur.to) {
				cur.to = sp.to
			}
		default:
			total += cur.to.Sub(cur.from)
			cur = sp
		}
	}
	if len(spans) > 0 {
		total += cur.to.Sub(cur.from)
	}
	return total.Seconds()
}

// span is when a step ran.
type span struct{ from, to time.Time }

func stepSpans(t tierTime) []span {
	var out []span
	for _, s := range t.Steps {
		if s.State != notRun {
			out = append(out, span{s.Started, s.Started.Add(time.Duration(s.Seconds * float64(time.Second)))})
		}
	}
	return out
}

// overlaps reports whether two tiers' steps ran at the same time.
func overlaps(a, b tierTime) bool {
	for _, x := range stepSpans(a) {
		for _, y := range stepSpans(b) {
			if x.from.Before(y.to) && y.from.Before(x.to) {
				return true
			}
		}
	}
	return false
}

// readTiers reads every tier's events, and returns the tiers in the order
// they were last written.
func readTiers(dir string) (map[string]*tierEvents, []string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, err
	}
	events := map[string]*tierEvents{}
	var order []string
	for _, f := range files {
		base := filepath.Base(f)
		if base == stepsFile || base == summaryJSON {
			continue
		}
		name := strings.TrimSuffix(base, ".json")
		te, err := readEvents(f, name)
		if err != nil {
			return nil, nil, err
		}
		events[name] = te
		order = append(order, name)
	}
	sort.SliceStable(order, func(i, j int) bool { return events[order[i]].modTime.Before(events[order[j]].modTime) })
	return events, order, nil
}

// tierOrder is the tiers of the run's plan in its order, then the tiers run
// on their own in the order they ran.
func tierOrder(planned []step, recorded []string) []string {
	var order []string
	seen := map[string]bool{}
	for _, s := range planned {
		if !seen[s.Tier] {
			seen[s.Tier] = true
			order = append(order, s.Tier)
		}
	}
	for _, name := range recorded {
		if !seen[name] {
			seen[name] = true
			order = append(order, name)
		}
	}
	return order
}

// tierOf times a tier by its make targets if the run's steps include them
// and its events were written while they ran; otherwise (it was run on its
// own, perhaps after `make test`) by the span of its events.
func tierOf(name string, planned []step, te *tierEvents) tierTime {
	t := tierTime{Name: name}
	for _, s := range planned {
		if s.Tier == name {
			t.Steps = append(t.Steps, s)
		}
	}
	if te != nil {
		for i := range te.tests {
			t.count(&te.tests[i])
		}
	}
	if te == nil || (len(t.Steps) > 0 && wroteDuring(te.modTime, t.Steps)) {
		t.TimedBy, t.Result = "make", stepsResult(t.Steps)
		for _, s := range t.Steps {
			t.Seconds += s.Seconds
		}
		return t
	}
	t.Steps = nil
	t.TimedBy, t.Result = "events", passed
	if te.failed() {
		t.Result = failed
	}
	if te.last.After(te.first) {
		t.Seconds = te.last.Sub(te.first).Seconds()
	}
	return t
}

func (t *tierTime) count(test *testTime) {
	if !test.topLevel() {
		return
	}
	t.Tests++
	switch {
	case test.failed():
		t.Failed++
	case test.Result == "skip":
		t.Skipped++
	}
}

// wroteDuring reports whether a file last written at mod was written by one
// of the steps (a second of slack for coarse file times).
func wroteDuring(mod time.Time, ss []step) bool {
	for _, s := range ss {
		if s.Started.IsZero() || mod.Before(s.Started.Add(-time.Second)) {
			continue
		}
		if s.State == running || !mod.After(s.Started.Add(time.Duration(s.Seconds*float64(time.Second))+time.Second)) {
			return true
		}
	}
	return false
}

func stepsResult(ss []step) string {
	result := notRun
	for _, s := range ss {
		switch s.State {
		case failed, running:
			return s.State
		case passed:
			result = passed
		}
	}
	return result
}

// slowest returns the n slowest of the top-level tests (or of the subtests),
// and how many there were.
func slowest(all []testTime, n int, topLevel bool) ([]testTime, int) {
	var picked []testTime
	for _, t := range all {
		if t.topLevel() == topLevel {
			picked = append(picked, t)
		}
	}
	sort.SliceStable(picked, func(i, j int) bool { return picked[i].Seconds > picked[j].Seconds })
	total := len(picked)
	if len(picked) > n {
		picked = picked[:n]
	}
	if picked == nil {
		picked = []testTime{}
	}
	return picked, total
}

// modulePath is the module path go.mod declares, or "" without one.
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// write keeps the summary as text and JSON in dir.
func (s *summary) write(dir, text string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, summaryJSON), append(data, '\n')); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, summaryText), []byte(text))
}
