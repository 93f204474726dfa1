package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// logWriter writes one container instance's output to
// <dir>/<instance>.log in the CRI format the kubelet uses
// (`<RFC3339Nano> <stream> F <line>`), so timestamps can be served.
type logWriter struct {
	path string
	mu   sync.Mutex
	f    *os.File
	wg   sync.WaitGroup
}

func newLogWriter(dir string, instance int32) (*logWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Keep this instance and the previous one (for `logs -p`).
	for i := instance - 2; i >= 0; i-- {
		if os.Remove(filepath.Join(dir, itoa(i)+".log")) != nil {
			break
		}
	}
	path := filepath.Join(dir, itoa(instance)+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, err
	}
	return &logWriter{path: path, f: f}, nil
}

// follow copies one stream into the log until EOF.
func (l *logWriter) follow(r *os.File, stream string) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer r.Close()
		br := bufio.NewReaderSize(r, 64*1024)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				l.write(stream, strings.TrimSuffix(line, "\n"))
			}
			if err != nil {
				return
			}
		}
	}()
}

func (l *logWriter) write(stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = fmt.Fprintf(l.f, "%s %s F %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, line)
}

// wait returns once both streams reached EOF (or after a second, when a
// child of the container still holds them open), then closes the file.
func (l *logWriter) wait() {
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	l.close()
}

func (l *logWriter) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.f.Close()
}

// tail returns the last lines of the log (at most maxBytes), for
// FallbackToLogsOnError.
func (l *logWriter) tail(lines, maxBytes int) string {
	var b bytes.Buffer
	_ = readLog(context.Background(), l.path, logOptions{tail: lines}, &b, nil)
	s := b.String()
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
	}
	return strings.TrimSpace(s)
}

// logOptions are the kubelet's containerLogs query parameters.
type logOptions struct {
	follow     bool
	timestamps bool
	tail       int // <0: all
	since      time.Time
	limitBytes int64
}

func parseLogOptions(q map[string][]string) logOptions {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	o := logOptions{follow: get("follow") == "true", timestamps: get("timestamps") == "true", tail: -1}
	if n, err := strconv.Atoi(get("tailLines")); err == nil && n >= 0 {
		o.tail = n
	}
	if n, err := strconv.ParseInt(get("limitBytes"), 10, 64); err == nil && n > 0 {
		o.limitBytes = n
	}
	if n, err := strconv.Atoi(get("sinceSeconds")); err == nil && n > 0 {
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if t, err := time.Parse(time.RFC3339, get("sinceTime")); err == nil {
		o.since = t
	}
	return o
}

// readLog writes the log at path to w. With follow it keeps reading until
// running reports false (the instance exited) or ctx ends.
func readLog(ctx context.Context, path string, o logOptions, w io.Writer, running func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	out := &limitedWriter{w: w, left: o.limitBytes, limit: o.limitBytes > 0}
	br := bufio.NewReader(f)
	lines, err := readLines(br)
	if err != nil {
		return err
	}
	if o.tail >= 0 && len(lines) > o.tail {
		lines = lines[len(lines)-o.tail:]
	}
	for _, l := range lines {
		if err := emit(out, l, o); err != nil {
			return ignoreLimit(err)
		}
	}
	if !o.follow || running == nil {
		return nil
	}
	return ignoreLimit(followLog(ctx, br, out, o, running))
}

func followLog(ctx context.Context, br *bufio.Reader, out *limitedWriter, o logOptions, running func() bool) error {
	var partial string
	for {
		line, err := br.ReadString('\n')
		partial += line
		if err == nil {
			if err := emit(out, strings.TrimSuffix(partial, "\n"), o); err != nil {
				return err
			}
			partial = ""
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if !running() {
			return nil
		}
		if f, ok := out.w.(interface{ Flush() }); ok {
			f.Flush()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readLines(br *bufio.Reader) ([]string, error) {
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return lines, nil
			}
			return nil, err
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
}

// emit writes one CRI log line as the user sees it.
func emit(w io.Writer, raw string, o logOptions) error {
	ts, rest, ok := strings.Cut(raw, " ")
	if !ok {
		return nil
	}
	_, rest, _ = strings.Cut(rest, " ") // stream
	_, msg, _ := strings.Cut(rest, " ") // tag
	if !o.since.IsZero() {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil && t.Before(o.since) {
			return nil
		}
	}
	if o.timestamps {
		msg = ts + " " + msg
	}
	_, err := io.WriteString(w, msg+"\n")
	return err
}

// limitedWriter enforces limitBytes; errLimit ends the stream early.
type limitedWriter struct {
	w     io.Writer
	left  int64
	limit bool
}

var errLimit = errors.New("log limit reached")

func (l *limitedWriter) Write(p []byte) (int, error) {
	if !l.limit {
		return l.w.Write(p)
	}
	if l.left <= 0 {
		return 0, errLimit
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}
