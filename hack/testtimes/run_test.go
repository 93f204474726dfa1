package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeMake is a make whose target "unit" fails with status 3 and every
// other target passes; each target it runs is appended to ran.
func fakeMake(t *testing.T) (makeCmd, ran string) {
	t.Helper()
	dir := t.TempDir()
	ran = filepath.Join(dir, "ran")
	makeCmd = filepath.Join(dir, "make")
	script := "#!/bin/sh\n" +
		"# $1 is --no-print-directory, $2 the target.\n" +
		"echo \"$2\" >> " + ran + "\n" +
		"[ \"$2\" != unit ] || exit 3\n"
	if err := os.WriteFile(makeCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return makeCmd, ran
}

func TestRunStopsAtTheFirstFailingStep(t *testing.T) {
	tests := []struct {
		name       string
		keepGoing  bool
		wantRan    string
		wantStates []string
	}{
		{name: "stops", wantRan: "tools\nvet\nunit\n", wantStates: []string{passed, passed, failed, notRun}},
		{name: "keeps going with make -k", keepGoing: true, wantRan: "tools\nvet\nunit\ntest-api\n", wantStates: []string{passed, passed, failed, passed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, ran, rec := runFakeMake(t, tt.keepGoing)
			if code != 3 {
				t.Errorf("run = %d, want unit's status 3", code)
			}
			if ran != tt.wantRan {
				t.Errorf("ran %q, want %q", ran, tt.wantRan)
			}
			var states []string
			for _, s := range rec.Steps {
				states = append(states, s.State)
			}
			if !reflect.DeepEqual(states, tt.wantStates) || rec.Steps[2].Exit != 3 {
				t.Errorf("steps %+v, want states %v and unit's exit 3", rec.Steps, tt.wantStates)
			}
		})
	}
}

// runFakeMake runs tools, vet, unit and test-api with the fake make in a
// directory an earlier run left an e2e.json in, and returns the exit status,
// the targets the fake make ran, and the steps file.
func runFakeMake(t *testing.T, keepGoing bool) (int, string, *steps) {
	t.Helper()
	plan, err := parseSteps([]string{"static:tools", "static:vet", "unit:unit", "api:test-api"})
	if err != nil {
		t.Fatal(err)
	}
	makeCmd, ran := fakeMake(t)
	dir := filepath.Join(t.TempDir(), "test-times")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	earlier := filepath.Join(dir, "e2e.json")
	if err := os.WriteFile(earlier, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &runner{dir: dir, make: makeCmd, keepGoing: keepGoing}
	code, err := r.run(plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(earlier); !os.IsNotExist(err) {
		t.Errorf("an earlier run's e2e.json is still there (%v)", err)
	}
	targets, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := readSteps(dir)
	if err != nil || rec == nil {
		t.Fatalf("steps: %v, %v", rec, err)
	}
	return code, string(targets), rec
}

func TestParseSteps(t *testing.T) {
	for _, bad := range []string{"unit", ":unit", "unit:", "unit:unit+", "unit:unit+e2e"} {
		if _, err := parseSteps([]string{bad}); err == nil {
			t.Errorf("parseSteps(%q) accepted it", bad)
		}
	}
	plan, err := parseSteps([]string{"static:vet", "integration:run-integration+e2e:run-e2e", "unit:unit"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range plan {
		got = append(got, fmt.Sprintf("%d %s:%s", s.Group, s.Tier, s.Target))
	}
	want := []string{"0 static:vet", "1 integration:run-integration", "1 e2e:run-e2e", "2 unit:unit"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
}

// TestStepsJoinedByPlusRunTogether runs two steps of a group with a make
// whose targets each wait for the other to have started: they finish only
// if they run at the same time. Their output comes prefixed with the tier,
// and a failing step of the group fails the run after both ended.
func TestStepsJoinedByPlusRunTogether(t *testing.T) {
	dir := t.TempDir()
	makeCmd := filepath.Join(dir, "make")
	script := "#!/bin/sh\n" +
		"touch " + dir + "/started-$2\n" +
		"other=a; [ \"$2\" = a ] && other=b\n" +
		"i=0; while [ ! -e " + dir + "/started-$other ]; do i=$((i+1)); [ $i -gt 100 ] && exit 9; sleep 0.05; done\n" +
		"echo \"hello from $2\"\n" +
		"[ \"$2\" != b ] || exit 4\n"
	if err := os.WriteFile(makeCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	plan, err := parseSteps([]string{"one:a+two:b", "three:c"})
	if err != nil {
		t.Fatal(err)
	}
	out := captureStdout(t, func() {
		r := &runner{dir: filepath.Join(dir, "times"), make: makeCmd}
		code, err := r.run(plan)
		if err != nil || code != 4 {
			t.Errorf("run = %d, %v; want b's status 4", code, err)
		}
	})
	for _, line := range []string{"[one] hello from a\n", "[two] hello from b\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("output %q lacks %q", out, line)
		}
	}
	rec, err := readSteps(filepath.Join(dir, "times"))
	if err != nil || rec == nil {
		t.Fatalf("steps: %v, %v", rec, err)
	}
	var states []string
	for _, s := range rec.Steps {
		states = append(states, s.State)
	}
	if want := []string{passed, failed, notRun}; !reflect.DeepEqual(states, want) {
		t.Errorf("states %v, want %v (a waits for b and b for a: they ran together; c never ran)", states, want)
	}
}

// captureStdout returns what f wrote to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		data, _ := io.ReadAll(r)
		done <- string(data)
	}()
	f()
	os.Stdout = saved
	w.Close()
	return <-done
}

func TestMakeFlag(t *testing.T) {
	tests := []struct {
		makeflags string
		want      bool
	}{
		{"", false},
		{"k", true},
		{"ks -j2 --jobserver-auth=3,4", true},
		{"s", false},
		{" --no-print-directory", false},
		{"-- GO=go1.26", false},
		{" -- k=1", false},
	}
	for _, tt := range tests {
		if got := makeFlag(tt.makeflags, 'k'); got != tt.want {
			t.Errorf("makeFlag(%q, 'k') = %v, want %v", tt.makeflags, got, tt.want)
		}
	}
}

// TestAFailedRecipeIsQuoted fails a step with no test events (a recipe of
// make failed, as CI's make release once did with only its exit status to
// show): the summary quotes the step's last lines, alone or beside another
// step, and the output still reaches the terminal.
func TestAFailedRecipeIsQuoted(t *testing.T) {
	for _, steps := range [][]string{{"release:release"}, {"sandbox:run-sandbox+release:release"}} {
		t.Run(strings.Join(steps, " "), func(t *testing.T) { failARecipe(t, steps) })
	}
}

// failARecipe runs steps with a make whose release target prints lines and
// fails, and checks what reached the terminal and what the summary quotes.
func failARecipe(t *testing.T, steps []string) {
	dir := t.TempDir()
	makeCmd := filepath.Join(dir, "make")
	script := "#!/bin/sh\n" +
		"[ \"$2\" = release ] || exit 0\n" +
		"for i in 1 2 3 4 5 6 7 8; do echo \"building $i\"; done\n" +
		"echo\n" +
		"echo 'Error: version segment starts with 0' >&2\n" +
		"echo 'make: *** [Makefile:119: release] Error 1' >&2\n" +
		"exit 2\n"
	if err := os.WriteFile(makeCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	plan, err := parseSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	times := filepath.Join(dir, "times")
	out := captureStdout(t, func() {
		r := &runner{dir: times, make: makeCmd}
		if code, err := r.run(plan); err != nil || code != 2 {
			t.Errorf("run = %d, %v; want release's status 2", code, err)
		}
	})
	if !strings.Contains(out, "building 8\n") {
		t.Errorf("the step's output did not reach the terminal: %q", out)
	}
	sum, err := summarize(times, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	text := sum.text()
	want := "  make release said last:\n" +
		"      building 5\n      building 6\n      building 7\n      building 8\n" +
		"      Error: version segment starts with 0\n" +
		"      make: *** [Makefile:119: release] Error 1\n"
	if !strings.HasSuffix(text, want) {
		t.Errorf("summary ends\n%s\nwant it to end\n%s", text, want)
	}
}
