package kubectletcd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats of the read commands.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

func checkFormat(f string) error {
	switch f {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usageError(fmt.Sprintf("unknown output format %q: use table, json or yaml", f))
}

// table is what a read command prints: a header and rows for -o table, and
// the value itself, marshalled, for json and yaml.
type table struct {
	header []string
	rows   [][]string
	value  any
}

func (t table) print(w io.Writer, format string) error {
	switch format {
	case formatJSON:
		b, err := json.MarshalIndent(t.value, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case formatYAML:
		b, err := yaml.Marshal(t.value)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// bytesIEC renders a size the way people read it: 0 B, 512 B, 1.5 KiB, 24 MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if v >= 10 {
		return fmt.Sprintf("%.0f %ciB", v, "KMGTPE"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}

// percent of part in whole, never NaN: a fresh member reports a zero size.
func percent(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

func yesNo(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
