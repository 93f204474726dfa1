package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// testTime is one run of a test, top-level or subtest.
type testTime struct {
	Tier    string  `json:"tier"`
	Package string  `json:"package"`
	Test    string  `json:"test"`
	Seconds float64 `json:"seconds"`
	// Result is pass, fail, skip, or unfinished: still running when its
	// package ended (a timeout) or when the events stopped (a killed run).
	Result string `json:"result"`

	// started is when the test started, or resumed if it is parallel.
	started time.Time
	// said is the last few lines the test logged ("file_test.go:12: ..."),
	// which for a failing test usually end with why it failed.
	said []string
	// panicking is set from a panic's first line until the first frame of
	// its stack outside the runtime and the testing package is found, or
	// the first goroutine's stack ends without one (a timeout's alarm);
	// frameFunc is the function the stack line before named, inStack
	// whether that stack has begun.
	panicking bool
	inStack   bool
	frameFunc string
}

// keptLines is how many of a test's logged lines a failure quotes, and
// keptWidth how much of each. A test that fails with t.Errorf goes on and
// logs more, which looks the same as its failure: six lines reach further
// back than three did (a CI run's TestMigrate was quoted with three lines
// of progress, its Errorf farther back).
const (
	keptLines = 6
	keptWidth = 240
)

// logLine matches a line a test logged with t.Log, t.Error or t.Fatal.
var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// contextLine matches a logged line that gives a failure's context (a
// suite's dump of its namespace) rather than the failure.
var contextLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: context: `)

// crashLine matches the first line of a panic or of a fatal runtime error:
// a test that panics logs no failure of its own, so its last logged lines
// would say only what went well.
var crashLine = regexp.MustCompile(`^(panic: |fatal error: )`)

// frameLine matches the file line of a stack frame ("\t/path/x.go:12 +0x28").
var frameLine = regexp.MustCompile(`^\t(\S+\.go):(\d+)( |$)`)

// remember keeps a logged line, the last keptLines of them; lines of
// context are not kept, so that a dump after a failure leaves its reason.
// A panic is kept too, with the first frame of its stack in the code under
// test.
func (t *testTime) remember(output string) {
	switch {
	case crashLine.MatchString(output):
		t.panicking, t.inStack, t.frameFunc = true, false, ""
		t.keep(output)
		return
	case t.panicking:
		t.followPanic(output)
		return
	}
	if !logLine.MatchString(output) || contextLine.MatchString(output) {
		return
	}
	t.keep(output)
}

// followPanic reads a panic's stack, a function line then its file line,
// until a frame outside the runtime and the testing package.
func (t *testTime) followPanic(output string) {
	m := frameLine.FindStringSubmatch(output)
	switch {
	case m == nil && strings.HasPrefix(output, "goroutine "):
		t.inStack = true
		return
	case m == nil && strings.TrimSpace(output) == "" && t.inStack:
		t.panicking = false
		return
	case m == nil:
		t.frameFunc = strings.TrimSpace(output)
		return
	}
	fn := t.frameFunc
	if fn == "" || strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "testing.") || strings.HasPrefix(fn, "panic(") {
		return
	}
	if i := strings.LastIndex(fn, "("); i > 0 {
		fn = fn[:i]
	}
	t.keep(fmt.Sprintf("at %s:%s in %s", filepath.Base(m[1]), m[2], fn))
	t.panicking = false
}

func (t *testTime) keep(output string) {
	line := strings.TrimSpace(output)
	if len(line) > keptWidth {
		line = line[:keptWidth] + " ..."
	}
	t.said = append(t.said, line)
	if len(t.said) > keptLines {
		t.said = t.said[len(t.said)-keptLines:]
	}
}

func (t *testTime) topLevel() bool { return !strings.Contains(t.Test, "/") }

func (t *testTime) failed() bool { return t.Result == "fail" || t.Result == "unfinished" }

// packageEnd is how a package's tests ended.
type packageEnd struct {
	result      string // pass, fail or skip
	buildFailed bool
	at          time.Time
}

// tierEvents is what one tier's recorded events say.
type tierEvents struct {
	tests    []testTime
	packages map[string]*packageEnd
	pkgOrder []string
	// pkgSaid is the last lines each package printed outside its tests
	// (TestMain's), quoted when it fails there.
	pkgSaid     map[string][]string
	first, last time.Time // the span of the events' times
	modTime     time.Time // when the file was last written
}

func readEvents(path, tier string) (*tierEvents, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	te := &tierEvents{packages: map[string]*packageEnd{}, pkgSaid: map[string][]string{}, modTime: info.ModTime()}
	running := map[string]int{} // package and test → index in te.tests of its latest run
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		var ev event
		if len(line) > 0 && json.Unmarshal(line, &ev) == nil {
			te.add(tier, &ev, running)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	te.closeUnfinished()
	return te, nil
}

// widen stretches the span of the events' times to t.
func (te *tierEvents) widen(t time.Time) {
	if t.IsZero() {
		return
	}
	if te.first.IsZero() || t.Before(te.first) {
		te.first = t
	}
	if t.After(te.last) {
		te.last = t
	}
}

func (te *tierEvents) add(tier string, ev *event, running map[string]int) {
	te.widen(ev.Time)
	if ev.Package == "" {
		return
	}
	key := ev.Package + "\x00" + ev.Test
	switch {
	case ev.Test != "" && ev.Action == "run":
		running[key] = len(te.tests)
		te.tests = append(te.tests, testTime{Tier: tier, Package: ev.Package, Test: ev.Test, started: ev.Time})
	case ev.Test != "" && ev.Action == "output":
		if i, ok := running[key]; ok {
			te.tests[i].remember(ev.Output)
		}
	case ev.Test != "" && ev.Action == "cont":
		if i, ok := running[key]; ok {
			te.tests[i].started = ev.Time
		}
	case ev.Test != "" && isEnd(ev.Action):
		if i, ok := running[key]; ok {
			t := &te.tests[i]
			t.Result, t.Seconds = ev.Action, max(ev.Elapsed, since(t.started, ev.Time))
		}
	case ev.Test == "" && ev.Action == "output":
		te.keepPackageLine(ev.Package, ev.Output)
	case ev.Test == "" && isEnd(ev.Action):
		if _, seen := te.packages[ev.Package]; !seen {
			te.pkgOrder = append(te.pkgOrder, ev.Package)
		}
		te.packages[ev.Package] = &packageEnd{result: ev.Action, buildFailed: ev.FailedBuild != "", at: ev.Time}
	}
}

// keepPackageLine keeps a line a package printed outside its tests, the
// last keptLines of them, leaving out go test's own verdict lines.
func (te *tierEvents) keepPackageLine(pkg, output string) {
	line := strings.TrimSpace(output)
	if line == "" || line == "FAIL" || line == "PASS" || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "ok  \t") ||
		strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
		return
	}
	te.pkgSaid[pkg] = append(te.pkgSaid[pkg], line)
	if said := te.pkgSaid[pkg]; len(said) > keptLines {
		te.pkgSaid[pkg] = said[len(said)-keptLines:]
	}
}

// since is the seconds from start to end, or 0 if either is unknown. A
// test's own Elapsed leaves out the time its parallel subtests ran after it
// returned (a table of parallel subtests takes "0.00s"); the span of its
// events from its start, or its resumption if it is parallel itself, to its
// end does not.
func since(start, end time.Time) float64 {
	if start.IsZero() || end.IsZero() || !end.After(start) {
		return 0
	}
	return end.Sub(start).Seconds()
}

func isEnd(action string) bool { return action == "pass" || action == "fail" || action == "skip" }

// closeUnfinished gives each test that never ended the time it had run when
// its package ended, or when the events stopped.
func (te *tierEvents) closeUnfinished() {
	for i := range te.tests {
		t := &te.tests[i]
		if t.Result != "" {
			continue
		}
		t.Result = "unfinished"
		end := te.last
		if p := te.packages[t.Package]; p != nil && !p.at.IsZero() {
			end = p.at
		}
		t.Seconds = since(t.started, end)
	}
}

// failed reports whether any package or test of the tier failed.
func (te *tierEvents) failed() bool {
	for _, p := range te.packages {
		if p.result == "fail" {
			return true
		}
	}
	for i := range te.tests {
		if te.tests[i].failed() {
			return true
		}
	}
	return false
}

// failure is one thing that went wrong, as precisely as the events say.
type failure struct {
	Tier    string `json:"tier"`
	Package string `json:"package"`
	Test    string `json:"test,omitempty"`
	What    string `json:"what"`
	// Said is the last lines the test logged before it failed.
	Said []string `json:"said,omitempty"`
}

// failures lists the packages that did not build, the failing tests none of
// whose subtests failed (the parents of a failing subtest fail with it and
// say nothing more), and the packages that failed outside any test.
func (te *tierEvents) failures(tier string) []failure {
	var out []failure
	testFailed := map[string]bool{}
	for i := range te.tests {
		t := &te.tests[i]
		if !t.failed() {
			continue
		}
		testFailed[t.Package] = true
		if te.failingSubtest(t) {
			continue
		}
		what := "failed"
		if t.Result == "unfinished" {
			what = "did not finish: still running when its package (or the run) ended"
		}
		out = append(out, failure{Tier: tier, Package: t.Package, Test: t.Test, What: what, Said: t.said})
	}
	for _, name := range te.pkgOrder {
		switch p := te.packages[name]; {
		case p.buildFailed:
			out = append(out, failure{Tier: tier, Package: name, What: "build failed"})
		case p.result == "fail" && !testFailed[name]:
			out = append(out, failure{Tier: tier, Package: name, What: "failed outside its tests (TestMain, or before any test ran)", Said: te.pkgSaid[name]})
		}
	}
	return out
}

func (te *tierEvents) failingSubtest(parent *testTime) bool {
	for i := range te.tests {
		t := &te.tests[i]
		if t.Package == parent.Package && t.failed() && strings.HasPrefix(t.Test, parent.Test+"/") {
			return true
		}
	}
	return false
}
