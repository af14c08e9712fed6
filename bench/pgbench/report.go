package main

// Results, the tables, and the Markdown and JSON files.

import (
	"fmt"
	"math"
	"os"
	"strings"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/kv/postgres"
)

type results struct {
	Config map[string]any `json:"config"`
	Short  []*row         `json:"short"`       // sides: PostgreSQL, Pebble; seconds
	Two    []*row         `json:"two_servers"` // sides: one server, two servers; files/s
	Scale  []*row         `json:"scale"`       // sides: PostgreSQL, Pebble
	Notes  []string       `json:"notes"`
}

// row is one metric, measured on the sides of its table.
type row struct {
	Name    string               `json:"name"`
	Unit    string               `json:"unit"`
	Higher  bool                 `json:"higher_is_better"`
	Op      string               `json:"op,omitempty"` // what DB's counts are per
	Runs    map[string][]float64 `json:"runs"`         // side: the value of each run, in order
	Missing map[string]string    `json:"missing,omitempty"`
	DB      map[string]*dbCounts `json:"db,omitempty"` // side on PostgreSQL: what the database did
}

func newRow(name, unit string, higher bool) *row {
	return &row{Name: name, Unit: unit, Higher: higher, Runs: map[string][]float64{},
		Missing: map[string]string{}, DB: map[string]*dbCounts{}}
}

// row adds a short workload's row: seconds, and the database's counts per
// op.
func (r *results) row(name, op string) *row {
	x := newRow(name, "s", false)
	x.Op = op
	r.Short = append(r.Short, x)
	return x
}

func (r *row) add(side string, v float64) {
	r.Runs[side] = append(r.Runs[side], v)
	fmt.Fprintf(os.Stderr, "   %-44s %-12s %10.4g %s\n", r.Name, side, v, r.Unit)
}

func (r *row) miss(side string, err error) {
	r.Missing[side] = err.Error()
	fmt.Fprintf(os.Stderr, "   %-44s %-12s %10s (%v)\n", r.Name, side, "-", err)
}

func (r *row) value(side string) float64 { return median(r.Runs[side]) }

// speed is how many times faster side a is than side b (NaN if unknown).
func (r *row) speed(a, b string) float64 {
	v, w := r.value(a), r.value(b)
	if math.IsNaN(v) || math.IsNaN(w) || v <= 0 || w <= 0 {
		return math.NaN()
	}
	if r.Higher {
		return v / w
	}
	return w / v
}

// counts returns the database counts of side, made if needed.
func (r *row) counts(side string) *dbCounts {
	if r.DB[side] == nil {
		r.DB[side] = &dbCounts{}
	}
	return r.DB[side]
}

// dbCounts sums what a PostgreSQL store did over some measurements and
// the operations they made.
type dbCounts struct {
	Ops        int64 `json:"ops"`
	RoundTrips int64 `json:"round_trips"`
	Updates    int64 `json:"updates"`
	Views      int64 `json:"views"`
	Retries    int64 `json:"retries"` // Updates' fns run again
	Guessed    int64 `json:"guessed"` // Updates' reads answered by guesses
	Stale      int64 `json:"stale"`   // retries after a wrong guess
}

func (c *dbCounts) add(before, after postgres.Stats, ops int) {
	c.Ops += int64(ops)
	c.RoundTrips += after.RoundTrips - before.RoundTrips
	c.Updates += after.Updates - before.Updates
	c.Views += after.Views - before.Views
	c.Retries += (after.Attempts - after.Updates) - (before.Attempts - before.Updates)
	c.Guessed += after.Guessed - before.Guessed
	c.Stale += after.Stale - before.Stale
}

func (c *dbCounts) per(n int64) string {
	if c == nil || c.Ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g", float64(n)/float64(c.Ops))
}

func cell(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.4g", v)
}

func ratioCell(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// report prints the tables and notes and writes the results.
func (b *bench) report() error {
	md := &strings.Builder{}
	fmt.Fprintf(md, "# bench/pgbench %s\n\n", b.Date)
	fmt.Fprintf(md, "Command: `%s`\n\n", strings.Join(append([]string{"go run ./bench/pgbench"}, os.Args[1:]...), " "))
	if len(b.results.Short) > 0 {
		say(md, fmt.Sprintf("One server on PostgreSQL against the same server on Pebble: median of %d runs (seconds), "+
			"the speed ratio, and what each operation asked of PostgreSQL (round trips, Updates, Views, reads of Updates answered by guesses, "+
			"Updates run again, of which after a stale guess):", b.runs))
		var rows [][]string
		for _, r := range b.results.Short {
			c := r.DB[sidePG]
			var rt, up, vw, gu, re string = "-", "-", "-", "-", "-"
			if c != nil {
				rt, up, vw, gu = c.per(c.RoundTrips), c.per(c.Updates), c.per(c.Views), c.per(c.Guessed)
				re = c.per(c.Retries) + " (" + c.per(c.Stale) + ")"
			}
			rows = append(rows, []string{r.Name, cell(r.value(sidePG)), cell(r.value(sidePebble)),
				ratioCell(r.speed(sidePG, sidePebble)), r.Op, rt, up, vw, gu, re})
		}
		benchkit.Table(md, "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|",
			[]string{"workload", "PostgreSQL s", "Pebble s", "PG/Pebble speed", "per", "round trips", "Updates", "Views", "guessed", "retries (stale)"}, rows)
		fmt.Println()
		md.WriteString("\n")
	}
	if len(b.results.Two) > 0 {
		say(md, fmt.Sprintf("Two servers on one PostgreSQL database against one of them alone, the same work (median of %d runs), "+
			"and the database's work per file created:", b.runs))
		var rows [][]string
		for _, r := range b.results.Two {
			one, two := r.DB[sideOne], r.DB[sideTwo]
			rows = append(rows, []string{r.Name, cell(r.value(sideOne)), cell(r.value(sideTwo)), ratioCell(r.speed(sideTwo, sideOne)),
				one.per(one.RoundTrips) + " / " + two.per(two.RoundTrips), one.per(one.Updates) + " / " + two.per(two.Updates),
				one.per(one.Retries) + " / " + two.per(two.Retries)})
		}
		benchkit.Table(md, "|---|--:|--:|--:|--:|--:|--:|",
			[]string{"workload", "one server files/s", "two servers files/s", "two/one", "round trips (one / two)", "Updates (one / two)", "retries (one / two)"}, rows)
		fmt.Println()
		md.WriteString("\n")
	}
	if len(b.results.Scale) > 0 {
		say(md, "Scale: objects PUT straight into the bucket, then imported through a fresh server on each store:")
		var rows [][]string
		for _, r := range b.results.Scale {
			rows = append(rows, []string{r.Name, r.Unit, cell(r.value(sidePG)), cell(r.value(sidePebble)), ratioCell(r.speed(sidePG, sidePebble))})
		}
		benchkit.Table(md, "|---|---|--:|--:|--:|", []string{"metric", "unit", "PostgreSQL", "Pebble", "PG/Pebble speed"}, rows)
		for _, r := range b.results.Scale {
			if c := r.DB[sidePG]; c != nil {
				b.Note("scale, PostgreSQL, %s: %s round trips, %s Updates, %s Views and %s retries per file", r.Name,
					c.per(c.RoundTrips), c.per(c.Updates), c.per(c.Views), c.per(c.Retries))
			}
		}
		fmt.Println()
		md.WriteString("\n")
	}
	say(md, "Notes:")
	benchkit.PrintNotes(md, b.Notes)
	b.results.Notes = b.Notes
	b.results.Config = map[string]any{"files": b.files, "ls": b.lsEntries, "untar": b.untarFiles, "size": b.seq,
		"runs": b.runs, "writers": b.writers, "per_writer": b.perWriter, "objects": b.objects, "stat_sample": b.statSample}
	return b.WriteResults(md.String(), b.results)
}

// say prints a paragraph and adds it to md.
func say(md *strings.Builder, s string) {
	fmt.Println(s)
	fmt.Fprintf(md, "%s\n\n", s)
}
