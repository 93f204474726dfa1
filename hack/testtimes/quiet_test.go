package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// testdata/failing-run.json is `go test -json -timeout 2s ./...` of a small
// module: a package that does not compile, one with a failing subtest and a
// failing parallel subtest, one with no tests, one that passes (a table, a
// skip, a parallel test printing to stdout) and one whose test hangs until
// the timeout (its goroutine dump cut short).
const failingRunStdout = `FAIL	example.com/scratch/broken [build failed]
=== RUN   TestBad
    fail_test.go:11: before the subtests
=== RUN   TestBad/broken
    fail_test.go:15: want 3 members, got 2
    helpers_test.go:84: context: operator log lines of e2e-bad:
        {"level":"info","msg":"reconciled"}
    helpers_test.go:107: context: pod bad-x container etcd: 2 restarts, last exit 1 (Error), termination message:
--- FAIL: TestBad/broken (0.04s)
--- FAIL: TestBad (0.04s)
?   	example.com/scratch/notests	[no test files]
=== RUN   TestRace
=== RUN   TestRace/leader
=== PAUSE TestRace/leader
=== CONT  TestRace/leader
    fail_test.go:23: leader started
    fail_test.go:26: leader lost its lease
--- FAIL: TestRace/leader (0.02s)
--- FAIL: TestRace (0.00s)
FAIL
FAIL	example.com/scratch/fail	0.077s
ok  	example.com/scratch/pass	0.114s
=== RUN   TestHangs
    slow_test.go:9: waiting for quorum
panic: test timed out after 2s
	running tests:
		TestHangs (2s)

FAIL	example.com/scratch/slow	2.006s
FAIL
`

const failingRunStderr = `# example.com/scratch/broken [example.com/scratch/broken.test]
broken/broken.go:3:28: cannot use "forty-two" (untyped string constant) as int value in return statement
`

func TestRecordPrintsWhatGoTestPrintsWithoutJSON(t *testing.T) {
	in := readTestdata(t, "failing-run.json")
	var kept, stdout, stderr bytes.Buffer
	if err := record(bytes.NewReader(in), &kept, newQuietPrinter(&stdout, &stderr)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kept.Bytes(), in) {
		t.Error("the kept events differ from the stream read")
	}
	if stdout.String() != failingRunStdout {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), failingRunStdout)
	}
	if stderr.String() != failingRunStderr {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), failingRunStderr)
	}
}

func TestRecordOfAPassingRunPrintsAPackageLineEach(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := record(bytes.NewReader(readTestdata(t, "passing-run.json")), &bytes.Buffer{}, newQuietPrinter(&stdout, &stderr))
	if err != nil {
		t.Fatal(err)
	}
	want := "?   \texample.com/scratch/notests\t[no test files]\nok  \texample.com/scratch/pass\t0.115s\n"
	if stdout.String() != want || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want stdout %q and nothing on stderr", stdout.String(), stderr.String(), want)
	}
}

func TestRecordOfAKilledRunPrintsWhatWasRunning(t *testing.T) {
	// The stream of failing-run.json up to the hanging test's log line, as
	// if go test had been killed there.
	in := cutAfter(t, readTestdata(t, "failing-run.json"), "waiting for quorum")
	var stdout bytes.Buffer
	if err := record(bytes.NewReader(in), &bytes.Buffer{}, newQuietPrinter(&stdout, &bytes.Buffer{})); err != nil {
		t.Fatal(err)
	}
	wantEnd := `testtimes: example.com/scratch/slow did not finish; its tests that were still running said:
=== RUN   TestHangs
    slow_test.go:9: waiting for quorum
FAIL
`
	if !strings.HasSuffix(stdout.String(), wantEnd) {
		t.Errorf("stdout:\n%s\nwant it to end with:\n%s", stdout.String(), wantEnd)
	}
}

func TestRecordPrintsLinesThatAreNotEvents(t *testing.T) {
	in := "not an event\n" + `{"Action":"start","Package":"p"}` + "\n" + "no newline at the end"
	var kept, stdout bytes.Buffer
	if err := record(strings.NewReader(in), &kept, newQuietPrinter(&stdout, &bytes.Buffer{})); err != nil {
		t.Fatal(err)
	}
	if kept.String() != in {
		t.Errorf("kept %q, want %q", kept.String(), in)
	}
	want := "not an event\nno newline at the end" +
		"testtimes: p did not finish; its tests that were still running said:\nFAIL\n"
	if stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// cutAfter returns the lines of a stream up to and including the first that
// contains marker.
func cutAfter(t *testing.T, stream []byte, marker string) []byte {
	t.Helper()
	i := bytes.Index(stream, []byte(marker))
	if i < 0 {
		t.Fatalf("%q is not in the stream", marker)
	}
	return stream[:i+bytes.IndexByte(stream[i:], '\n')+1]
}
