// Command testtimes keeps the cost of `make test` visible: it records the
// events of every `go test -json` run, times each make step, and prints the
// slowest tests and each tier's time at the end of a run, also one that
// failed part way.
//
//	go test -json ./... | testtimes record [-dir D] [-append] <tier>
//	testtimes run [-dir D] [-make make] <tier>:<target>...
//	testtimes summary [-dir D]
//
// record prints what `go test` prints without -json (a line per package and
// the whole output of each failing test) while the tests run, and keeps the
// events in D/<tier>.json. run runs each make target in turn (stopping at
// the first failure unless make was given -k), keeps the steps' times in
// D/steps.json, then prints the summary. summary prints the summary of what
// D holds and writes it to D/summary.txt and D/summary.json.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const defaultDir = "bin/test-times"

// Options of the summary, shared by run and summary.
type reportFlags struct {
	dir      string
	top      int
	subtests int
}

func (r *reportFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.dir, "dir", defaultDir, "directory of the recorded events, step times and summary")
	fs.IntVar(&r.top, "top", 25, "how many of the slowest top-level tests to list")
	fs.IntVar(&r.subtests, "subtests", 15, "how many of the slowest subtests to list")
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	var code int
	switch cmd {
	case "record":
		code = recordCmd(args)
	case "run":
		code = runCmd(args)
	case "summary":
		code = summaryCmd(args)
	default:
		usage()
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  go test -json ... | testtimes record [-dir D] [-append] <tier>
  testtimes run [-dir D] [-make make] [-top N] [-subtests N] <tier>:<target>...
  testtimes summary [-dir D] [-top N] [-subtests N]`)
	os.Exit(2)
}

func summaryCmd(args []string) int {
	fs := flag.NewFlagSet("summary", flag.ExitOnError)
	var rf reportFlags
	rf.register(fs)
	_ = fs.Parse(args)
	sum, err := summarize(rf.dir, rf.top, rf.subtests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 1
	}
	if len(sum.Tiers) == 0 {
		fmt.Fprintf(os.Stderr, "testtimes: nothing recorded in %s yet: run make test, or one of its test targets\n", rf.dir)
		return 1
	}
	return report(sum, rf.dir)
}

// report prints the summary and writes it next to the events.
func report(sum *summary, dir string) int {
	text := sum.text()
	fmt.Print(text)
	if err := sum.write(dir, text); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 1
	}
	shown := dir
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, dir); err == nil && !strings.HasPrefix(rel, "..") {
			shown = rel
		}
	}
	fmt.Printf("  (kept in %s: %s, %s and each tier's events)\n",
		shown, summaryText, summaryJSON)
	return 0
}
