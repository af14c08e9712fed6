package main

// Results, the table, and the Markdown and JSON files.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"bucketfs/bench/internal/benchkit"
)

// result is one row: a metric of a workload, measured on some targets.
type result struct {
	Workload int                  `json:"workload"`
	Metric   string               `json:"metric"`
	Unit     string               `json:"unit"`
	Higher   bool                 `json:"higher_is_better"`
	Read     bool                 `json:"read"`              // also compared with the raw store
	Value    map[string]float64   `json:"value"`             // target: the median of its runs
	Runs     map[string][]float64 `json:"runs"`              // target: the value of every run, in order
	Missing  map[string]string    `json:"missing,omitempty"` // target: why there is no value
	Ratios   map[string]string    `json:"ratios,omitempty"`  // target: speed ratios, filled by report
}

// row returns the result for metric of workload w, making it if needed.
func (s *suite) row(w int, metric, unit string, higher bool) *result {
	for _, r := range s.results {
		if r.Workload == w && r.Metric == metric {
			return r
		}
	}
	r := &result{Workload: w, Metric: metric, Unit: unit, Higher: higher,
		Value: map[string]float64{}, Runs: map[string][]float64{}, Missing: map[string]string{}}
	s.results = append(s.results, r)
	return r
}

// set records v as the value of target's next run; the figure is the
// median of its runs so far.
func (r *result) set(target string, v float64) {
	r.Runs[target] = append(r.Runs[target], v)
	r.Value[target] = median(r.Runs[target])
	fmt.Fprintf(os.Stderr, "   %-38s %-17s %12.4g %s\n", r.Metric, target, v, r.Unit)
}

// median is the middle of v, or the mean of the two middle values.
func median(v []float64) float64 {
	v = slices.Sorted(slices.Values(v))
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}

func (r *result) miss(target, why string) {
	r.Missing[target] = why
	fmt.Fprintf(os.Stderr, "   %-38s %-17s %12s (%s)\n", r.Metric, target, "-", why)
}

// speed is how many times faster target is than ref on r (NaN if unknown).
func (r *result) speed(target, ref string) float64 {
	v, ok1 := r.Value[target]
	w, ok2 := r.Value[ref]
	if !ok1 || !ok2 || v <= 0 || w <= 0 {
		return math.NaN()
	}
	if r.Higher {
		return v / w
	}
	return w / v
}

func ratioCell(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func valueCell(r *result, t string) string {
	if v, ok := r.Value[t]; ok {
		return fmt.Sprintf("%.4g", v)
	}
	if why, ok := r.Missing[t]; ok && strings.HasPrefix(why, "timeout") {
		return "timeout"
	}
	if _, ok := r.Missing[t]; ok {
		return "failed"
	}
	return "-"
}

// report prints the tables and writes them, as Markdown and JSON, to -out.
func (s *suite) report() error {
	var cols []string
	for _, name := range targetOrder {
		if s.target(name) != nil {
			cols = append(cols, name)
		}
	}
	md := &strings.Builder{}
	fmt.Fprintf(md, "# bench/suite %s\n\nAbsolute figures (unit per row):\n\n", s.Date)
	head := append([]string{"#", "metric", "unit"}, cols...)
	fmt.Fprintf(md, "| %s |\n|---|---|---%s|\n", strings.Join(head, " | "), strings.Repeat("|--:", len(cols)))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range s.results {
		row := []string{fmt.Sprint(r.Workload), r.Metric, r.Unit}
		for _, t := range cols {
			row = append(row, valueCell(r, t))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		fmt.Fprintf(md, "| %s |\n", strings.Join(row, " | "))
	}
	tw.Flush()

	// Speed ratios: to the local directory, to the loopback mount, and for
	// reads to the raw store.
	fmt.Println()
	fmt.Println("speed ratios (above 1 is faster): x local / x loopback [/ x raw for reads]")
	md.WriteString("\nSpeed ratios, above 1 is faster: x local dir / x go-fuse loopback, and for reads / x raw S3:\n\n")
	var rcols []string
	for _, t := range cols {
		if t != tLocal && t != tRaw {
			rcols = append(rcols, t)
		}
	}
	head = append([]string{"#", "metric"}, rcols...)
	fmt.Fprintf(md, "| %s |\n|---|---%s|\n", strings.Join(head, " | "), strings.Repeat("|--:", len(rcols)))
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range s.results {
		row := []string{fmt.Sprint(r.Workload), r.Metric}
		r.Ratios = map[string]string{}
		for _, t := range rcols {
			parts := []string{ratioCell(r.speed(t, tLocal)), ratioCell(r.speed(t, tLoopback))}
			if r.Read {
				parts = append(parts, ratioCell(r.speed(t, tRaw)))
			}
			c := strings.Join(parts, " / ")
			if strings.Trim(c, "-/ ") == "" {
				c = "-"
			}
			r.Ratios[t] = c
			row = append(row, c)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		fmt.Fprintf(md, "| %s |\n", strings.Join(row, " | "))
	}
	tw.Flush()

	var missing []string
	for _, r := range s.results {
		most := 0
		for _, v := range r.Runs {
			most = max(most, len(v))
		}
		for _, t := range cols {
			if why, ok := r.Missing[t]; ok {
				missing = append(missing, fmt.Sprintf("%d %s, %s: %s", r.Workload, r.Metric, t, why))
			}
			if n := len(r.Runs[t]); n > 0 && n < most {
				missing = append(missing, fmt.Sprintf("%d %s, %s: the median of %d runs, not %d", r.Workload, r.Metric, t, n, most))
			}
		}
	}
	md.WriteString("\nNotes:\n\n")
	fmt.Println()
	benchkit.PrintNotes(md, append(s.Notes, missing...))
	if len(s.profiles) > 0 {
		md.WriteString("\nProfiles of the whole process (goroutines labelled side=client, bucketfs, loopback), e.g.\n" +
			"`go tool pprof -top -tagignore=side=client X.cpu.pprof` and\n" +
			"`go tool pprof -top -sample_index=alloc_space -diff_base X.allocs-base.pprof X.allocs.pprof`:\n\n")
		fmt.Println("- profiles (go tool pprof -top -tagignore=side=client X.cpu.pprof):")
		for _, p := range s.profiles {
			rel, _ := filepath.Rel(s.Out, p)
			fmt.Fprintf(md, "- `%s.{cpu,allocs,allocs-base}.pprof`\n", rel)
			fmt.Printf("    %s.{cpu,allocs,allocs-base}.pprof\n", p)
		}
	}
	return s.WriteResults(md.String(), map[string]any{"date": s.Date, "targets": cols, "results": s.results,
		"notes": s.Notes, "missing": missing, "profiles": s.profiles,
		"config": map[string]any{"quick": s.quick, "seq_bytes": s.sz.seq, "fresh_16mib_files": s.sz.fresh,
			"small_64kib_files": s.sz.small, "creates": s.sz.creates, "untar_files": s.sz.untar,
			"rename_files": s.sz.rename, "fio_bytes": s.sz.fioSize, "fio_runtime": s.sz.fioRuntime.String(),
			"bigdir_objects": s.sz.bigDir, "namespace_entries": s.sz.entries, "runs": s.runs,
			"peer_timeout": s.timeout.String(), "bigdir_peer_timeout": s.bigDirTimeout.String(),
			"io_size": ioSize, "raw_part": partSize, "raw_parallel": rawParallel, "nfs_inflight": nfsInflight,
			"export_delay": exportDelay.String(), "dir": s.Base, "cpus": runtime.NumCPU(), "go": runtime.Version()}})
}
