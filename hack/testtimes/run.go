package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// step is one make target of a run and the tier its time counts towards.
type step struct {
	Tier   string `json:"tier"`
	Target string `json:"target"`
	// State is "not run", "running" (only ever read back if the run was
	// killed), "passed" or "failed".
	State   string    `json:"state"`
	Started time.Time `json:"started,omitzero"`
	Seconds float64   `json:"seconds"`
	Exit    int       `json:"exit"`
}

const (
	notRun  = "not run"
	running = "running"
	passed  = "passed"
	failed  = "failed"
)

// steps is the file a run keeps its steps' times in, rewritten after each.
type steps struct {
	Started time.Time `json:"started"`
	Steps   []step    `json:"steps"`
}

func runCmd(args []string) int {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var rf reportFlags
	rf.register(fs)
	makeCmd := fs.String("make", "make", "the make to run each target with ($(MAKE))")
	_ = fs.Parse(args)
	plan, err := parseSteps(fs.Args())
	if err != nil || len(plan) == 0 {
		usage()
	}
	makeflags := os.Getenv("MAKEFLAGS")
	r := &runner{dir: rf.dir, make: *makeCmd, keepGoing: makeFlag(makeflags, 'k')}
	if makeFlag(makeflags, 'n') {
		// make -n: show each step's commands, record nothing.
		return r.dryRun(plan)
	}
	code, err := r.run(plan)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
	}
	sum, err := summarize(rf.dir, rf.top, rf.subtests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes: no summary:", err)
		return max(code, 1)
	}
	fmt.Println()
	if report(sum, rf.dir) != 0 {
		return max(code, 1)
	}
	return code
}

func parseSteps(args []string) ([]step, error) {
	var plan []step
	for _, a := range args {
		tier, target, ok := strings.Cut(a, ":")
		if !ok || tier == "" || target == "" {
			return nil, fmt.Errorf("%q is not <tier>:<target>", a)
		}
		plan = append(plan, step{Tier: tier, Target: target, State: notRun})
	}
	return plan, nil
}

// makeFlag reports whether make was given the one-letter option c, which it
// passes to recipes as the first word of MAKEFLAGS ("k", "ks -j2 ...").
func makeFlag(makeflags string, c rune) bool {
	first, _, _ := strings.Cut(makeflags, " ")
	return first != "" && !strings.HasPrefix(first, "-") && strings.ContainsRune(first, c)
}

type runner struct {
	dir       string
	make      string
	keepGoing bool
}

// run runs the steps in order and returns the exit status of the first that
// failed; it stops there unless make was given -k. Interrupted (Ctrl-C, or
// a SIGTERM, which it passes on to the step), it stops after the step ends.
func (r *runner) run(plan []step) (int, error) {
	if err := clearDir(r.dir); err != nil {
		return 1, err
	}
	rec := steps{Started: time.Now(), Steps: plan}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)

	code := 0
	for i := range rec.Steps {
		s := &rec.Steps[i]
		s.State, s.Started = running, time.Now()
		if err := writeSteps(r.dir, &rec); err != nil {
			return 1, err
		}
		status, interrupted := r.runStep(s.Target, stop)
		s.Seconds, s.Exit = time.Since(s.Started).Seconds(), status
		s.State = passed
		if status != 0 {
			s.State = failed
			code = firstNonZero(code, status)
		}
		if err := writeSteps(r.dir, &rec); err != nil {
			return max(code, 1), err
		}
		if interrupted || (status != 0 && !r.keepGoing) {
			break
		}
	}
	return code, nil
}

func (r *runner) dryRun(plan []step) int {
	for _, s := range plan {
		if status, _ := r.runStep(s.Target, nil); status != 0 {
			return status
		}
	}
	return 0
}

func firstNonZero(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// runStep runs one target in a make of its own, the way make runs a
// prerequisite, and returns its exit status (128 plus the signal's number
// if a signal killed it) and whether the run was interrupted meanwhile.
func (r *runner) runStep(target string, stop <-chan os.Signal) (int, bool) {
	cmd := exec.Command(r.make, "--no-print-directory", target)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 127, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	interrupted := false
	for {
		select {
		case sig := <-stop:
			// Ctrl-C reaches the whole process group by itself; a SIGTERM
			// may have been sent to this process alone.
			interrupted = true
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(sig)
			}
		case err := <-done:
			return exitStatus(err), interrupted
		}
	}
}

func exitStatus(err error) int {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exit.ExitCode()
}

// clearDir removes what an earlier run left, so that the summary of a run
// that stops part way does not list the tiers it never reached.
func clearDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range append(old, filepath.Join(dir, summaryText)) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeSteps replaces the steps file by renaming a complete one over it.
func writeSteps(dir string, rec *steps) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, stepsFile), append(data, '\n'))
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readSteps(dir string) (*steps, error) {
	data, err := os.ReadFile(filepath.Join(dir, stepsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec steps
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", stepsFile, err)
	}
	return &rec, nil
}
