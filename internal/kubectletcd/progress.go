package kubectletcd

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress is a single line on a terminal that long commands rewrite as they
// go, and erase when done. Off a terminal (piped, redirected, in CI) it
// prints nothing: the command's result on stdout is all there is.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	on      bool
	shown   bool
	last    time.Time
	minWait time.Duration
}

func (a *app) progressTo(w io.Writer) *progress {
	return &progress{w: w, on: a.terminal(w), minWait: 100 * time.Millisecond}
}

// show replaces the line at once.
func (p *progress) show(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.write(format, args...)
}

// tick replaces the line unless it was replaced a moment ago: for counters
// that change with every chunk of a stream.
func (p *progress) tick(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < p.minWait {
		return
	}
	p.write(format, args...)
}

func (p *progress) write(format string, args ...any) {
	if !p.on {
		return
	}
	// Carriage return and erase-line: the next message takes the place of
	// this one.
	fmt.Fprintf(p.w, "\r\x1b[K"+format, args...)
	p.shown = true
	p.last = time.Now()
}

// clear erases the line, before the command prints its result.
func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// progress of a command's session, on its stderr.
func (s *session) progress(cmd interface{ ErrOrStderr() io.Writer }) *progress {
	return s.progressTo(cmd.ErrOrStderr())
}

// note prints a line that stays, in place of the progress line: for results
// that come one at a time during a long wait. Off a terminal it prints
// nothing, as show does.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[K"+format+"\n", args...)
	p.shown = false
}
