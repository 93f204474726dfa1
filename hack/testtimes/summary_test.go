package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var runStarted = time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)

// makeTestRun is the steps of a `make test` whose api tier failed, so the
// tiers after it did not run.
func makeTestRun() *steps {
	rec := &steps{Started: runStarted}
	at := runStarted
	add := func(tier, target, state string, seconds float64, exit int) {
		s := step{Tier: tier, Target: target, State: state, Exit: exit}
		if state != notRun {
			s.Started, s.Seconds = at, seconds
			at = at.Add(time.Duration(seconds * float64(time.Second)))
		}
		rec.Steps = append(rec.Steps, s)
	}
	add("static", "tools", passed, 1.5, 0)
	add("static", "check-generate", passed, 10, 0)
	add("static", "vet", passed, 20, 0)
	add("static", "lint", passed, 30, 0)
	add("unit", "unit", passed, 120, 0)
	add("api", "test-api", failed, 45, 2)
	add("cert-manager", "test-cert-manager", notRun, 0, 0)
	add("e2e", "test-e2e", notRun, 0, 0)
	return rec
}

// recordedDir holds the steps (if any) and the tiers' events, each written
// at the time given.
func recordedDir(t *testing.T, rec *steps, tiers map[string]string, written map[string]time.Time) string {
	t.Helper()
	dir := t.TempDir()
	if rec != nil {
		if err := writeSteps(dir, rec); err != nil {
			t.Fatal(err)
		}
	}
	for tier, fixture := range tiers {
		path := filepath.Join(dir, tier+".json")
		if err := os.WriteFile(path, readTestdata(t, fixture), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, written[tier], written[tier]); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const makeTestRunText = `
Slowest tests (5 of 12)
   seconds  tier  package                   test
      2.00  api   example.com/scratch/slow  TestHangs     unfinished
      0.08  unit  example.com/scratch/pass  TestTable
      0.08  api   example.com/scratch/pass  TestTable
      0.04  api   example.com/scratch/fail  TestBad       FAIL
      0.03  api   example.com/scratch/pass  TestParallel

Slowest subtests (3 of 8)
   seconds  tier  package                   test
      0.06  api   example.com/scratch/pass  TestTable/60ns
      0.06  unit  example.com/scratch/pass  TestTable/60ns
      0.04  api   example.com/scratch/fail  TestBad/broken  FAIL

Tiers
  tier                seconds  result    tests failed skipped
  static                61.50  passed
    tools                1.50  passed
    check-generate      10.00  passed
    vet                 20.00  passed
    lint                30.00  passed
  unit                 120.00  passed        4              1
  api                   45.00  failed        8      3       1
  cert-manager              -  not run
  e2e                       -  not run
  total                226.50

Failures
  api  example.com/scratch/fail    TestBad/broken   failed
  api  example.com/scratch/fail    TestRace/leader  failed
  api  example.com/scratch/slow    TestHangs        did not finish: still running when its package (or the run) ended
  api  example.com/scratch/broken                   build failed
  TestBad/broken said last:
      fail_test.go:15: want 3 members, got 2
  TestRace/leader said last:
      fail_test.go:23: leader started
      fail_test.go:26: leader lost its lease
  TestHangs said last:
      slow_test.go:9: waiting for quorum
      panic: test timed out after 2s
`

func TestSummaryOfAMakeTestRunThatFailed(t *testing.T) {
	rec := makeTestRun()
	dir := recordedDir(t, rec,
		map[string]string{"unit": "passing-run.json", "api": "failing-run.json"},
		map[string]time.Time{"unit": runStarted.Add(181 * time.Second), "api": runStarted.Add(200 * time.Second)})

	sum, err := summarize(dir, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	header := "Test times of make test, started " + runStarted.Local().Format("2006-01-02 15:04:05") + "\n"
	if got := sum.text(); got != header+makeTestRunText {
		t.Errorf("text:\n%s\nwant:\n%s%s", got, header, makeTestRunText)
	}
	for _, tier := range sum.Tiers {
		if tier.TimedBy != "make" {
			t.Errorf("tier %s is timed by %s, want make", tier.Name, tier.TimedBy)
		}
	}
}

func TestSummaryIsWrittenAsTextAndJSON(t *testing.T) {
	dir := recordedDir(t, makeTestRun(),
		map[string]string{"unit": "passing-run.json"},
		map[string]time.Time{"unit": runStarted.Add(100 * time.Second)})
	sum, err := summarize(dir, 25, 15)
	if err != nil {
		t.Fatal(err)
	}
	if err := sum.write(dir, sum.text()); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(dir, summaryText))
	if err != nil || string(text) != sum.text() {
		t.Errorf("summary.txt: %q, %v; want the text printed", text, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, summaryJSON))
	if err != nil {
		t.Fatal(err)
	}
	var back summary
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.TotalSeconds != 226.5 || len(back.Tiers) != 5 || back.Tiers[1].Tests != 4 || len(back.SlowestTests) != 4 {
		t.Errorf("summary.json reads back as %+v", back)
	}
	// A second summary of the same directory does not take the summary
	// for a tier's events.
	again, err := summarize(dir, 25, 15)
	if err != nil || len(again.Tiers) != 5 {
		t.Errorf("summarizing again: %v, %d tiers; want the same 5", err, len(again.Tiers))
	}
}

func TestTierRunOnItsOwnIsTimedByItsEvents(t *testing.T) {
	tests := []struct {
		name       string
		rec        *steps
		written    time.Time
		wantResult string
		wantTiers  int
	}{
		{
			name:       "no make test run",
			written:    runStarted,
			wantResult: failed,
			wantTiers:  1,
		},
		{
			// make unit after a make test: the run's unit step did not
			// write these events.
			name:       "after a make test run",
			rec:        makeTestRun(),
			written:    runStarted.Add(time.Hour),
			wantResult: failed,
			wantTiers:  5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := recordedDir(t, tt.rec, map[string]string{"unit": "failing-run.json"}, map[string]time.Time{"unit": tt.written})
			sum, err := summarize(dir, 25, 15)
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Tiers) != tt.wantTiers {
				t.Fatalf("%d tiers, want %d", len(sum.Tiers), tt.wantTiers)
			}
			unit := tierNamed(t, sum, "unit")
			// From the first event's time to the last's.
			if unit.TimedBy != "events" || math.Abs(unit.Seconds-2.265638834) > 1e-6 || unit.Result != tt.wantResult || unit.Steps != nil {
				t.Errorf("unit tier is %+v, want timed by events, 2.27s, %s, no steps", unit, tt.wantResult)
			}
			if !hasRow(sum.text(), "unit * 2.27 failed 8 3 1") {
				t.Errorf("the tiers table does not mark unit as run on its own:\n%s", sum.text())
			}
		})
	}
}

func TestSummaryOfAKilledRun(t *testing.T) {
	// make test killed while unit ran: its step is still "running" and the
	// events stop in the middle of a test.
	rec := makeTestRun()
	unit := &rec.Steps[4]
	unit.State, unit.Seconds = running, 0
	for i := 5; i < len(rec.Steps); i++ {
		rec.Steps[i] = step{Tier: rec.Steps[i].Tier, Target: rec.Steps[i].Target, State: notRun}
	}
	dir := t.TempDir()
	if err := writeSteps(dir, rec); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "unit.json")
	if err := os.WriteFile(events, cutAfter(t, readTestdata(t, "failing-run.json"), "waiting for quorum"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(events, unit.Started.Add(time.Minute), unit.Started.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	sum, err := summarize(dir, 25, 15)
	if err != nil {
		t.Fatal(err)
	}
	if got := tierNamed(t, sum, "unit"); got.Result != running || got.TimedBy != "make" {
		t.Errorf("unit tier is %+v, want running, timed by make", got)
	}
	hangs := failure{Tier: "unit", Package: "example.com/scratch/slow", Test: "TestHangs",
		What: "did not finish: still running when its package (or the run) ended",
		Said: []string{"slow_test.go:9: waiting for quorum"}}
	found := false
	for _, f := range sum.Failures {
		found = found || reflect.DeepEqual(f, hangs)
	}
	if !found {
		t.Errorf("failures %+v do not include %+v", sum.Failures, hangs)
	}
}

// hasRow reports whether text has a line of the words of row.
func hasRow(text, row string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == row {
			return true
		}
	}
	return false
}

func TestTestTimeIncludesItsParallelSubtests(t *testing.T) {
	te, err := readEvents("testdata/failing-run.json", "unit")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range te.tests {
		// go test says TestRace took 0.00s: it returned before its two
		// parallel subtests ran, 0.02s each.
		if test.Test == "TestRace" && (test.Seconds < 0.02 || test.Result != "fail") {
			t.Errorf("TestRace: %.3fs, %s; want at least its subtests' 0.02s, fail", test.Seconds, test.Result)
		}
	}
}

func tierNamed(t *testing.T, sum *summary, name string) tierTime {
	t.Helper()
	for _, tier := range sum.Tiers {
		if tier.Name == name {
			return tier
		}
	}
	t.Fatalf("no tier %s in %+v", name, sum.Tiers)
	return tierTime{}
}

func TestModulePath(t *testing.T) {
	gomod := filepath.Join(t.TempDir(), "go.mod")
	if err := os.WriteFile(gomod, []byte("// the project\nmodule example.com/shop\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := modulePath(gomod); got != "example.com/shop" {
		t.Errorf("modulePath = %q, want example.com/shop", got)
	}
	if got := modulePath(filepath.Join(t.TempDir(), "go.mod")); got != "" {
		t.Errorf("modulePath without a go.mod = %q, want empty", got)
	}
}

func TestStepsThatRanTogetherCountOnceInTheTotal(t *testing.T) {
	at := func(s float64) time.Time { return runStarted.Add(time.Duration(s * float64(time.Second))) }
	rec := &steps{Started: runStarted, Steps: []step{
		{Tier: "unit", Target: "unit", State: passed, Started: at(0), Seconds: 100, Group: 0},
		{Tier: "integration", Target: "run-integration", State: passed, Started: at(100), Seconds: 200, Group: 1},
		{Tier: "e2e", Target: "run-e2e", State: passed, Started: at(100), Seconds: 500, Group: 1},
	}}
	sum, err := summarize(recordedDir(t, rec, nil, nil), 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if sum.TotalSeconds != 600 {
		t.Errorf("total %.2f s, want 600: unit, then the longer of integration and e2e", sum.TotalSeconds)
	}
	if got := sum.concurrentTiers(); len(got) != 1 || got[0][0] != "integration" || got[0][1] != "e2e" {
		t.Errorf("tiers that ran together: %v, want integration and e2e", got)
	}
	if text := sum.text(); !strings.Contains(text, "integration and e2e ran at the same time") {
		t.Errorf("the tier table does not say integration and e2e ran together:\n%s", text)
	}
}

// A test that panics logs no failure of its own: what it said last is what
// went well. The panic and the first frame of its stack in the code under
// test are quoted instead (a cleanup that panicked, here).
func TestAPanicIsQuotedWithWhereItHappened(t *testing.T) {
	tt := &testTime{}
	for _, line := range []string{
		"=== CONT  TestA\n",
		"    a_test.go:10: a says\n",
		"    a_test.go:13: writer: 10 writes acknowledged and all present\n",
		"    a_test.go:13: history: linearizable\n",
		"--- FAIL: TestA (0.30s)\n",
		"panic: assignment to entry in nil map [recovered, repanicked]\n",
		"\n",
		"goroutine 6 [running]:\n",
		"testing.tRunner.func1.2({0x55b7e0, 0x6cbc40})\n",
		"\t/usr/local/go/src/testing/testing.go:1974 +0x232\n",
		"panic({0x55b7e0?, 0x6cbc40?})\n",
		"\t/usr/local/go/src/runtime/panic.go:860 +0x13a\n",
		"example.com/tt.TestA.func1()\n",
		"\t/tmp/tt/a_test.go:12 +0x28\n",
		"testing.(*common).Cleanup.func1()\n",
		"\t/usr/local/go/src/testing/testing.go:1317 +0x109\n",
	} {
		tt.remember(line)
	}
	want := []string{
		"a_test.go:10: a says",
		"a_test.go:13: writer: 10 writes acknowledged and all present",
		"a_test.go:13: history: linearizable",
		"panic: assignment to entry in nil map [recovered, repanicked]",
		"at a_test.go:12 in example.com/tt.TestA.func1",
	}
	if !reflect.DeepEqual(tt.said, want) {
		t.Errorf("said %q, want %q", tt.said, want)
	}
}

// TestAFailedTestMainIsQuoted: a package that fails before any test ran
// (its TestMain could not start an API server, as in a CI run whose CRD
// the server refused) is listed with the lines it printed, without go
// test's verdict lines.
func TestAFailedTestMainIsQuoted(t *testing.T) {
	dir := t.TempDir()
	pkg := "example.com/m/test/api"
	var events strings.Builder
	for _, out := range []string{
		"starting kube-apiserver: unable to install CRDs\n",
		" | rule: self.name == ”\n",
		"ERROR: <input>:1:137: Syntax error\n",
		"FAIL\texample.com/m/test/api\t8.738s\n",
	} {
		fmt.Fprintf(&events, `{"Action":"output","Package":%q,"Output":%q}`+"\n", pkg, out)
	}
	fmt.Fprintf(&events, `{"Action":"fail","Package":%q,"Elapsed":8.7}`+"\n", pkg)
	if err := os.WriteFile(filepath.Join(dir, "api.json"), []byte(events.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := summarize(dir, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := "  example.com/m/test/api said last:\n" +
		"      starting kube-apiserver: unable to install CRDs\n" +
		"      | rule: self.name == ”\n" +
		"      ERROR: <input>:1:137: Syntax error\n"
	if text := sum.text(); !strings.HasSuffix(text, want) {
		t.Errorf("summary ends\n%s\nwant it to end\n%s", text, want)
	}
}
