package kubectletcd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Output formats the plugin handles itself; the rest (json, yaml, name,
// jsonpath, go-template, ...) are cli-runtime's printers.
const (
	formatTable = "table" // the default; the name -o had for it before it took kubectl's printers
	formatWide  = "wide"
	formatName  = "name"
)

// outputFlags is -o of a command that prints a result: the plugin's own
// table by default, a wider one with -o wide, or what kubectl's printers make
// of the result as an object (every result carries apiVersion and kind).
type outputFlags struct {
	flags *genericclioptions.PrintFlags
}

// outputOption narrows the printers a command offers.
type outputOption func(*genericclioptions.PrintFlags)

// withoutName leaves -o name out: the result names nothing.
func withoutName(f *genericclioptions.PrintFlags) { f.NamePrintFlags = nil }

// addOutputFlags adds -o (and --template and the other printer flags) to c.
func addOutputFlags(c *cobra.Command, opts ...outputOption) *outputFlags {
	o := &outputFlags{flags: genericclioptions.NewPrintFlags("")}
	for _, opt := range opts {
		opt(o.flags)
	}
	o.flags.AddFlags(c)
	c.Flags().Lookup("output").Usage = "output format: a table (the default), or one of " + strings.Join(o.allowed(), ", ")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.allowed(), cobra.ShellCompDirectiveNoFileComp))
	return o
}

// allowed are the formats -o takes besides the default table.
func (o *outputFlags) allowed() []string {
	return append([]string{formatWide}, o.flags.AllowedFormats()...)
}

func (o *outputFlags) format() string { return strings.ToLower(*o.flags.OutputFormat) }

// human: the plugin's own table, plain or wide. --template without -o asks
// for a Go template, as it does of kubectl.
func (o *outputFlags) human() bool {
	switch o.format() {
	case "", formatTable:
		return *o.flags.TemplatePrinterFlags.TemplateArgument == ""
	case formatWide:
		return true
	}
	return false
}

func (o *outputFlags) wide() bool { return o.format() == formatWide }

// templated: a jsonpath or Go template prints the result.
func (o *outputFlags) templated() bool {
	return !o.human() && o.format() != formatName && !slices.Contains(o.flags.JSONYamlPrintFlags.AllowedFormats(), o.format())
}

// validate refuses, before the command does anything, a format no printer
// takes or a template that does not parse.
func (o *outputFlags) validate() error {
	if o.human() {
		return nil
	}
	_, err := o.flags.ToPrinter()
	switch {
	case genericclioptions.IsNoCompatiblePrinterError(err):
		return usageError(fmt.Sprintf("unknown output format %q: use one of %s (or leave -o out for the table)", o.format(), strings.Join(o.allowed(), ", ")))
	case err != nil:
		return usageError(err.Error())
	}
	return nil
}

// print writes result as -o asks; tableOf makes its human form, wide or
// not.
func (o *outputFlags) print(w io.Writer, result runtime.Object, tableOf func(wide bool) table) error {
	if o.human() {
		return tableOf(o.wide()).write(w)
	}
	p, err := o.flags.ToPrinter()
	if err != nil {
		return err
	}
	if l, ok := result.(namedItems); ok && o.format() == formatName {
		return printItemNames(w, l, p.PrintObj)
	}
	if o.templated() {
		// The template printers read a typed object through JSON, where
		// every number is a float (a DB size prints as 8.388608e+06);
		// unstructured content keeps integers integers, as kubectl's
		// objects are.
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(result)
		if err != nil {
			return err
		}
		result = &unstructured.Unstructured{Object: content}
	}
	return p.PrintObj(result, w)
}

// namedItems is a list result whose -o name lists its items: one line of
// <kind>.kubectl-etcd.cozystack.io/<name> each.
type namedItems interface {
	itemNames() (kind string, names []string)
}

func printItemNames(w io.Writer, l namedItems, printObj func(runtime.Object, io.Writer) error) error {
	kind, names := l.itemNames()
	for _, n := range names {
		item := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: n}}
		item.SetGroupVersionKind(resultGroupVersion.WithKind(kind))
		if err := printObj(item, w); err != nil {
			return err
		}
	}
	return nil
}

// table is the human form of a result: a header and rows.
type table struct {
	header []string
	rows   [][]string
}

func (t table) write(w io.Writer) error {
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
