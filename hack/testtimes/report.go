package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// text renders the summary as the table printed at the end of a run.
func (s *summary) text() string {
	var b strings.Builder
	if s.Started.IsZero() {
		b.WriteString("Test times (tiers run on their own)\n")
	} else {
		fmt.Fprintf(&b, "Test times of make test, started %s\n", s.Started.Local().Format("2006-01-02 15:04:05"))
	}
	s.testTable(&b, fmt.Sprintf("Slowest tests (%d of %d)", len(s.SlowestTests), s.TestCount), s.SlowestTests)
	s.testTable(&b, fmt.Sprintf("Slowest subtests (%d of %d)", len(s.SlowestSubtests), s.SubtestCount), s.SlowestSubtests)
	s.tierTable(&b)
	s.failureList(&b) // last, where the tail of a CI log shows it
	return b.String()
}

func (s *summary) testTable(b *strings.Builder, title string, tests []testTime) {
	if len(tests) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n", title)
	var table strings.Builder
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "   seconds\ttier\tpackage\ttest")
	for _, t := range tests {
		fmt.Fprintf(w, "%10.2f\t%s\t%s\t%s\t%s\n", t.Seconds, t.Tier, s.short(t.Package), t.Test, resultMark(t.Result))
	}
	_ = w.Flush()
	writeTrimmed(b, table.String())
}

// writeTrimmed writes text without the blanks tabwriter leaves at the ends
// of lines.
func writeTrimmed(b *strings.Builder, text string) {
	for _, line := range strings.SplitAfter(text, "\n") {
		if line != "" {
			b.WriteString(strings.TrimRight(line, " \n") + "\n")
		}
	}
}

// resultMark flags the tests that did not pass.
func resultMark(result string) string {
	switch result {
	case "fail":
		return "FAIL"
	case "pass":
		return ""
	default:
		return result
	}
}

func (s *summary) failureList(b *strings.Builder) {
	if len(s.Failures) == 0 {
		return
	}
	b.WriteString("\nFailures\n")
	var table strings.Builder
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", f.Tier, s.short(f.Package), f.Test, f.What)
	}
	_ = w.Flush()
	writeTrimmed(b, table.String())
	// What the failing tests last said, so that the end of a CI log is
	// enough to know why it failed.
	for _, f := range s.Failures {
		if len(f.Said) == 0 {
			continue
		}
		who := f.Test
		if who == "" {
			who = s.short(f.Package)
		}
		fmt.Fprintf(b, "  %s said last:\n", who)
		for _, line := range f.Said {
			fmt.Fprintf(b, "      %s\n", line)
		}
	}
}

func (s *summary) tierTable(b *strings.Builder) {
	width := len("total")
	for _, t := range s.Tiers {
		width = max(width, len(t.Name)+2)
		if len(t.Steps) < 2 {
			continue // a tier's only step is not listed under it
		}
		for _, st := range t.Steps {
			width = max(width, len(st.Target)+2)
		}
	}
	row := func(name, sec, result, tests, failed, skipped string) {
		line := fmt.Sprintf("  %-*s %10s  %-8s %6s %6s %7s", width, name, sec, result, tests, failed, skipped)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	b.WriteString("\nTiers\n")
	row("tier", "seconds", "result", "tests", "failed", "skipped")
	note := false
	for _, t := range s.Tiers {
		name := t.Name
		if t.TimedBy == "events" {
			name, note = name+" *", true
		}
		row(name, seconds(t.Seconds, t.Result), t.Result, count(t.Tests), count(t.Failed), count(t.Skipped))
		if len(t.Steps) < 2 {
			continue
		}
		for _, st := range t.Steps {
			row("  "+st.Target, seconds(st.Seconds, st.State), st.State, "", "", "")
		}
	}
	row("total", fmt.Sprintf("%.2f", s.TotalSeconds), "", "", "", "")
	for _, tiers := range s.concurrentTiers() {
		fmt.Fprintf(b, "  %s ran at the same time: the total counts that time once\n", together(tiers))
	}
	if note {
		b.WriteString("  * run on its own, not as a step of make test: timed by the span of its go test's events\n")
	}
}

// concurrentTiers lists the sets of tiers whose steps ran at the same time
// (tiers linked by overlapping steps, in the table's order).
func (s *summary) concurrentTiers() [][]string {
	set := s.overlapSets()
	var out [][]string
	for first := range set {
		var names []string
		for k, t := range s.Tiers {
			if set[k] == first {
				names = append(names, t.Name)
			}
		}
		if len(names) > 1 {
			out = append(out, names)
		}
	}
	return out
}

// overlapSets labels each tier with the first tier of its set: tiers timed
// by make whose steps overlap, directly or through others, share a set.
func (s *summary) overlapSets() []int {
	set := make([]int, len(s.Tiers))
	for i := range set {
		set[i] = i
	}
	for i, a := range s.Tiers {
		for j := i + 1; j < len(s.Tiers); j++ {
			b := s.Tiers[j]
			if a.TimedBy != "make" || b.TimedBy != "make" || !overlaps(a, b) {
				continue
			}
			from, to := set[j], set[i]
			for k := range set {
				if set[k] == from {
					set[k] = to
				}
			}
		}
	}
	return set
}

// together names tiers in prose: "a and b", "a, b and c".
func together(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func seconds(sec float64, state string) string {
	if state == notRun {
		return "-"
	}
	return fmt.Sprintf("%.2f", sec)
}

func count(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// short drops the module's path from a package's.
func (s *summary) short(pkg string) string {
	if s.module == "" {
		return pkg
	}
	if rest, ok := strings.CutPrefix(pkg, s.module+"/"); ok {
		return rest
	}
	return pkg
}
