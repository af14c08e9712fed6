package benchkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Table prints head and rows in aligned columns on stdout and appends them
// to md as a Markdown table whose separator row is sep (e.g. "|---|--:|").
func Table(md *strings.Builder, sep string, head []string, rows [][]string) {
	fmt.Fprintf(md, "| %s |\n%s\n", strings.Join(head, " | "), sep)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		fmt.Fprintf(md, "| %s |\n", strings.Join(row, " | "))
	}
	tw.Flush()
}

// Cell formats m[key], or is "-" if there is none.
func Cell(m map[string]float64, key, format string) string {
	if v, ok := m[key]; ok {
		return fmt.Sprintf(format, v)
	}
	return "-"
}

// PrintNotes prints notes as a list on stdout and appends them to md.
func PrintNotes(md *strings.Builder, notes []string) {
	for _, n := range notes {
		fmt.Println("-", n)
		fmt.Fprintf(md, "- %s\n", n)
	}
}

// WriteResults writes md and results, as indented JSON, to
// Out/Name-Date.md and .json, and says so.
func (r *Run) WriteResults(md string, results any) error {
	js, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	stem := filepath.Join(r.Out, r.Name+"-"+r.Date)
	fmt.Printf("wrote %s.md and %s.json\n", stem, stem)
	return errors.Join(os.WriteFile(stem+".md", []byte(md), 0o644),
		os.WriteFile(stem+".json", append(js, '\n'), 0o644))
}
