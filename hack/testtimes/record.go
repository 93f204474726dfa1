package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"
)

// event is one line of `go test -json` (see `go doc test2json`); build
// output carries ImportPath instead of Package and no Time.
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// Files of the directory that are not a tier's events.
const (
	stepsFile   = "steps.json"
	summaryJSON = "summary.json"
	summaryText = "summary.txt"
)

func recordCmd(args []string) int {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	dir := fs.String("dir", defaultDir, "directory to keep the events in, as <tier>.json")
	appendTo := fs.Bool("append", false, "add to the tier's events instead of replacing them (a tier of several go test runs)")
	_ = fs.Parse(args)
	tier := fs.Arg(0)
	if fs.NArg() != 1 || tier+".json" == stepsFile || tier+".json" == summaryJSON {
		usage()
	}
	// Ctrl-C reaches go test too: keep reading until it has said what it
	// has to say and closed the pipe.
	signal.Ignore(os.Interrupt)

	keep, err := openEvents(*dir, tier, *appendTo)
	if err != nil {
		// The tests run anyway; only their times go unrecorded.
		fmt.Fprintln(os.Stderr, "testtimes: not recording this run's times:", err)
		keep = nopCloser{io.Discard}
	}
	readErr := record(os.Stdin, keep, newQuietPrinter(os.Stdout, os.Stderr))
	if err := errors.Join(readErr, keep.Close()); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
	}
	// go test's own exit status, through `set -o pipefail`, says whether the
	// tests passed.
	return 0
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func openEvents(dir, tier string, appendTo bool) (io.WriteCloser, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	mode := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendTo {
		mode = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	return os.OpenFile(filepath.Join(dir, tier+".json"), mode, 0o644)
}

// record copies the stream to keep line by line, unbuffered so that a run
// killed part way leaves every event up to then, and hands each event to
// the printer. A line that is not an event (go test never writes one to
// stdout, but a wrapper might) is printed as it is.
func record(in io.Reader, keep io.Writer, p *quietPrinter) error {
	r := bufio.NewReader(in)
	var keepErr error
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := keep.Write(line); werr != nil && keepErr == nil {
				keepErr = fmt.Errorf("recording the events: %w", werr)
				keep = io.Discard
			}
			var ev event
			if json.Unmarshal(line, &ev) == nil && ev.Action != "" {
				p.handle(&ev)
			} else {
				p.raw(line)
			}
		}
		if errors.Is(err, io.EOF) {
			p.finish()
			return keepErr
		}
		if err != nil {
			p.finish()
			return errors.Join(keepErr, err)
		}
	}
}
