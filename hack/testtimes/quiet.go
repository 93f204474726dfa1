package main

import (
	"fmt"
	"io"
	"strings"
)

// quietPrinter turns the verbose stream of `go test -json` back into what
// `go test` prints without -json: the "ok" (or "no test files") line of a
// package that passed, and for a package that failed, the output of its
// failing tests and its own. A failing test's output keeps the "=== RUN"
// lines that say whose it is, and is printed as soon as its top-level test
// ends rather than when the whole package does. Compiler errors go to
// stderr as they arrive, as go test prints them.
type quietPrinter struct {
	out, errOut io.Writer
	packages    map[string]*packageLog
	order       []string // packages in the order they started
	anyFailed   bool
}

// packageLog is what a package has said that may still need printing.
type packageLog struct {
	own    []string
	trees  map[string][]testLine // output of each top-level test and its subtests, in order
	tops   []string              // top-level tests in the order they started
	states map[string]string     // the last action of each test: run, pass, fail or skip
}

type testLine struct{ test, text string }

func newQuietPrinter(out, errOut io.Writer) *quietPrinter {
	return &quietPrinter{out: out, errOut: errOut, packages: map[string]*packageLog{}}
}

func (p *quietPrinter) handle(ev *event) {
	if ev.Action == "build-output" {
		fmt.Fprint(p.errOut, ev.Output)
		return
	}
	if ev.Package == "" {
		return
	}
	pkg := p.packages[ev.Package]
	if pkg == nil {
		pkg = &packageLog{trees: map[string][]testLine{}, states: map[string]string{}}
		p.packages[ev.Package] = pkg
		p.order = append(p.order, ev.Package)
	}
	if ev.Test != "" {
		p.testEvent(pkg, ev)
		return
	}
	switch ev.Action {
	case "output":
		pkg.own = append(pkg.own, ev.Output)
	case "pass", "skip":
		for _, l := range pkg.own {
			if strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "?   \t") {
				fmt.Fprint(p.out, l)
			}
		}
		p.forget(ev.Package)
	case "fail":
		p.anyFailed = true
		p.printRest(pkg)
		p.forget(ev.Package)
	}
}

func (p *quietPrinter) testEvent(pkg *packageLog, ev *event) {
	top, _, _ := strings.Cut(ev.Test, "/")
	if _, seen := pkg.trees[top]; !seen {
		pkg.trees[top] = nil
		pkg.tops = append(pkg.tops, top)
	}
	switch ev.Action {
	case "output":
		pkg.trees[top] = append(pkg.trees[top], testLine{ev.Test, ev.Output})
	case "run", "pass", "skip", "fail":
		pkg.states[ev.Test] = ev.Action
	}
	if ev.Test == top && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail") {
		if ev.Action == "fail" {
			p.printTree(pkg, top)
		}
		delete(pkg.trees, top)
	}
}

// printTree prints the output of a top-level test and of those of its
// subtests that did not pass: what go test shows of a failing test.
func (p *quietPrinter) printTree(pkg *packageLog, top string) {
	for _, l := range pkg.trees[top] {
		if s := pkg.states[l.test]; s != "pass" && s != "skip" {
			fmt.Fprint(p.out, l.text)
		}
	}
}

// printRest prints what a failed package said that is not printed yet: the
// tests still running when it ended (a timeout's panic is theirs) and its own
// output.
func (p *quietPrinter) printRest(pkg *packageLog) {
	for _, top := range pkg.tops {
		if _, open := pkg.trees[top]; open {
			p.printTree(pkg, top)
			delete(pkg.trees, top) // listed again if it ran again (-count)
		}
	}
	for _, l := range pkg.own {
		fmt.Fprint(p.out, l)
	}
}

func (p *quietPrinter) forget(name string) {
	delete(p.packages, name)
	for i, n := range p.order {
		if n == name {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}

// raw prints a line that is not an event.
func (p *quietPrinter) raw(line []byte) {
	_, _ = p.out.Write(line)
}

// finish prints what the packages that never ended said (go test was killed,
// say), and the closing FAIL that go test prints after any failure.
func (p *quietPrinter) finish() {
	for _, name := range p.order {
		fmt.Fprintf(p.out, "testtimes: %s did not finish; its tests that were still running said:\n", name)
		p.printRest(p.packages[name])
		p.anyFailed = true
	}
	p.order, p.packages = nil, map[string]*packageLog{}
	if p.anyFailed {
		fmt.Fprintln(p.out, "FAIL")
	}
}
