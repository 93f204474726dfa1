package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// Group numbers the steps in the order they start: steps written
	// joined by "+" share a group and run at the same time.
	Group int `json:"group"`
	// Said is the last lines a failed step printed: the summary quotes
	// them when no test of its tier failed (a build or a make recipe did).
	Said []string `json:"said,omitempty"`
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

// parseSteps reads each argument as <tier>:<target>, or as several of them
// joined by "+" to run at the same time.
func parseSteps(args []string) ([]step, error) {
	var plan []step
	for group, a := range args {
		for part := range strings.SplitSeq(a, "+") {
			tier, target, ok := strings.Cut(part, ":")
			if !ok || tier == "" || target == "" {
				return nil, fmt.Errorf("%q is not <tier>:<target>", part)
			}
			plan = append(plan, step{Tier: tier, Target: target, State: notRun, Group: group})
		}
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

// run runs the steps in order, those of a group at the same time, and
// returns the exit status of the first that failed; it stops after that
// step's group unless make was given -k. Interrupted (Ctrl-C, or a SIGTERM,
// which it passes on to the steps), it stops after the running group ends.
func (r *runner) run(plan []step) (int, error) {
	if err := clearDir(r.dir); err != nil {
		return 1, err
	}
	rec := steps{Started: time.Now(), Steps: plan}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)

	var mu sync.Mutex // guards rec while a group's steps run
	save := func() error {
		mu.Lock()
		defer mu.Unlock()
		return writeSteps(r.dir, &rec)
	}
	code := 0
	for first := 0; first < len(rec.Steps); {
		group := groupAt(rec.Steps, first)
		for i := range group {
			group[i].State, group[i].Started = running, time.Now()
		}
		if err := save(); err != nil {
			return 1, err
		}
		interrupted := r.runGroup(group, stop, &mu)
		for _, s := range group {
			code = firstNonZero(code, s.Exit)
		}
		if err := save(); err != nil {
			return max(code, 1), err
		}
		if interrupted || (code != 0 && !r.keepGoing) {
			break
		}
		first += len(group)
	}
	return code, nil
}

// runGroup runs a group's steps at the same time, records each one's
// result under mu, and reports whether the run was interrupted meanwhile.
func (r *runner) runGroup(group []step, stop <-chan os.Signal, mu *sync.Mutex) bool {
	var interrupted atomic.Bool
	var wg sync.WaitGroup
	signals, endFanOut := fanOut(stop, len(group))
	defer endFanOut()
	for i := range group {
		wg.Go(func() {
			s := &group[i]
			said := &lastLines{keep: stepSaidLines}
			status, intr := r.runStep(s.Target, s.Tier, len(group) > 1, signals[i], said)
			if intr {
				interrupted.Store(true)
			}
			mu.Lock()
			defer mu.Unlock()
			s.Seconds, s.Exit, s.State = time.Since(s.Started).Seconds(), status, passed
			if status != 0 {
				s.State, s.Said = failed, said.lines()
			}
		})
	}
	wg.Wait()
	return interrupted.Load()
}

// fanOut passes each signal of stop on to n channels, one a step, until
// end is called.
func fanOut(stop <-chan os.Signal, n int) (chans []chan os.Signal, end func()) {
	chans = make([]chan os.Signal, n)
	for i := range chans {
		chans[i] = make(chan os.Signal, 1)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-stop:
				for _, c := range chans {
					select {
					case c <- sig:
					default:
					}
				}
			case <-done:
				return
			}
		}
	}()
	return chans, func() { close(done) }
}

// groupAt is the steps of the group that starts at index first.
func groupAt(plan []step, first int) []step {
	end := first + 1
	for end < len(plan) && plan[end].Group == plan[first].Group {
		end++
	}
	return plan[first:end]
}

func (r *runner) dryRun(plan []step) int {
	for _, s := range plan {
		if status, _ := r.runStep(s.Target, s.Tier, false, nil, nil); status != 0 {
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
// if a signal killed it) and whether the run was interrupted meanwhile. A
// step that runs beside others has each line of its output prefixed with
// its tier, so that the lines of the steps do not mix. said, if not nil,
// keeps the step's last lines.
func (r *runner) runStep(target, tier string, beside bool, stop <-chan os.Signal, said *lastLines) (int, bool) {
	cmd := exec.Command(r.make, "--no-print-directory", target)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if beside || said != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			return 127, false
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		prefix := ""
		if beside {
			cmd.Stdin, prefix = nil, "["+tier+"] "
		}
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			prefixLines(os.Stdout, pr, prefix, said)
		}()
		defer func() {
			// A process the step left running may hold the pipe open: its
			// output is not waited for past a moment.
			select {
			case <-copied:
			case <-time.After(2 * time.Second):
				pr.Close()
				<-copied
			}
		}()
		defer pw.Close()
	}
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

// prefixMu keeps whole lines: one step's line is written at a time.
var prefixMu sync.Mutex

// prefixLines copies r to w line by line, each line prefixed, until r
// ends; said, if not nil, keeps the last of them.
func prefixLines(w io.Writer, r io.Reader, prefix string, said *lastLines) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if !strings.HasSuffix(line, "\n") {
				line += "\n"
			}
			if said != nil {
				said.add(line)
			}
			prefixMu.Lock()
			_, _ = io.WriteString(w, prefix+line)
			prefixMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// stepSaidLines is how many of a failed step's last lines the summary
// quotes: make's error and the lines just before it.
const stepSaidLines = 6

// lastLines keeps the last non-blank lines written, at most keep of them.
type lastLines struct {
	keep  int
	mu    sync.Mutex
	ring  []string
	start int
}

func (l *lastLines) add(line string) {
	line = strings.TrimRight(line, " \t\r\n")
	if strings.TrimSpace(line) == "" {
		return
	}
	const longest = 300 // a line of JSON or a long command is cut
	if len(line) > longest {
		line = line[:longest] + "…"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, line)
		return
	}
	l.ring[l.start] = line
	l.start = (l.start + 1) % l.keep
}

func (l *lastLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(slices.Clone(l.ring[l.start:]), l.ring[:l.start]...)
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
