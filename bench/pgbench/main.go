// Command pgbench measures, in one run, a bucketfs server on PostgreSQL
// against the same server on its own Pebble store (issue 23's benchmarks
// and its "scale that can be seen"):
//
//	go run ./bench/pgbench [-files 2000] [-objects 100000] [-runs 3]
//
// One embedded store (internal/s3local) is the external bucket of every
// server, each under a prefix of its own; one PostgreSQL server started
// from Debian's binaries (internal/pgtest) holds the metadata of the
// servers on PostgreSQL, each file system in a schema of its own. The
// engines run in this process, each with a FUSE mount (as bench/suite
// does), so the store's counters (postgres.Store.Stats) say what each
// operation asked of the database. It prints times, speed ratios
// PostgreSQL/Pebble, the database's work per operation, the two-server
// create workload and the scale figures, and writes them to bench/results.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/engine"
	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
)

// exportDelay keeps every server from uploading during a measurement.
const exportDelay = time.Hour

// Side names, in table order.
const (
	sidePG     = "PostgreSQL"
	sidePebble = "Pebble"
)

type bench struct {
	*benchkit.Run
	files, lsEntries, untarFiles int // short workloads
	seq                          int64
	runs                         int
	writers, perWriter           int // two servers
	objects, bigDir, statSample  int // scale
	putWorkers                   int
	only                         map[string]bool

	pattern benchkit.Pattern
	store   *s3local.Server
	pg      *pgtest.Server
	dbURL   string
	sides   []*server // the two servers of the short workloads: PostgreSQL, Pebble
	results results
}

// server is one engine with its FUSE mount.
type server struct {
	side string // sidePG or sidePebble
	name string
	in   *benchkit.Instance
	ps   *postgres.Store // the database's counters; nil on Pebble
}

func (s *server) eng() *engine.Engine { return s.in.Eng }

func main() {
	b := &bench{Run: benchkit.New("pgbench")}
	flag.IntVar(&b.files, "files", 2000, "4 KiB files created, then stat'ed, in each run")
	flag.IntVar(&b.lsEntries, "ls", 10000, "entries of the directory listed with ls -l")
	flag.IntVar(&b.untarFiles, "untar", 1000, "files in the tree extracted")
	size := flag.String("size", "256MiB", "sequential write and read size")
	flag.IntVar(&b.runs, "runs", 3, "runs of each short workload and of the two-server one (the figure is their median)")
	flag.IntVar(&b.writers, "writers", 4, "writers of the two-server workload, each in a directory of its own")
	flag.IntVar(&b.perWriter, "per-writer", 500, "4 KiB files each writer creates")
	flag.IntVar(&b.objects, "objects", 100_000, "objects PUT into the bucket for the scale workload (10000000 takes hours)")
	flag.IntVar(&b.statSample, "stat-sample", 10_000, "files of the big directory stat'ed for the scale workload's stat rate")
	flag.IntVar(&b.putWorkers, "put-workers", 32, "parallel PUTs of the scale workload's objects")
	only := flag.String("only", "", "comma-separated parts to run: short, two, scale (default all)")
	flag.StringVar(&b.Dir, "dir", "/var/tmp", "parent of the temporary state, mounts and PostgreSQL's data")
	flag.StringVar(&b.Out, "out", "bench/results", "directory for the Markdown and JSON")
	flag.Parse()
	var err error
	if b.seq, err = benchkit.ParseSize(*size, "256MiB"); err != nil {
		b.Exit(2, err)
	}
	if b.runs < 1 || b.files < 1 || b.lsEntries < 1 || b.untarFiles < 1 || b.writers < 1 || b.perWriter < 1 || b.objects < 1 {
		b.Exit(2, errors.New("counts must be at least 1"))
	}
	if *only != "" {
		b.only = map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains([]string{"short", "two", "scale"}, p) {
				b.Exit(2, fmt.Errorf("bad -only %q (want short, two, scale)", *only))
			}
			b.only[p] = true
		}
	}
	b.Main(b.run)
}

func (b *bench) wants(part string) bool { return b.only == nil || b.only[part] }

func (b *bench) run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	start := time.Now()
	b.pattern = benchkit.NewPattern()
	b.Notes = append(b.Notes,
		fmt.Sprintf("%d CPUs, %s; one process runs the embedded store (the external bucket of every server), the bucketfs engines and their FUSE mounts, and the measuring client; PostgreSQL %s runs beside it on loopback (pgtest: fsync on, small memory settings)", runtime.NumCPU(), runtime.Version(), pgVersion()),
		fmt.Sprintf("export delay %v, no polling, no revalidation: nothing is uploaded or re-listed during a measurement", exportDelay),
		"ratios are speeds PostgreSQL/Pebble: 1.00 is parity, above 1 PostgreSQL is faster (times inverted, rates divided); issue 23's goal for metadata-heavy work is at least 0.5")
	if err := b.setup(); err != nil {
		return err
	}
	var took []string
	for _, p := range []struct {
		name string
		run  func() error
	}{{"short", b.short}, {"two", b.twoServers}, {"scale", b.scale}} {
		if !b.wants(p.name) {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "== %s\n", p.name)
		if err := p.run(); err != nil {
			if b.Ctx.Err() != nil {
				return err
			}
			b.Note("%s stopped: %v", p.name, err)
			fmt.Fprintf(os.Stderr, "pgbench: %s: %v\n", p.name, err)
		}
		took = append(took, fmt.Sprintf("%s: %.0f s", p.name, time.Since(t0).Seconds()))
	}
	b.Note("pgbench took %.0f s (%s)", time.Since(start).Seconds(), strings.Join(took, ", "))
	return b.report()
}

// setup starts the embedded store and PostgreSQL, and opens the two
// servers of the short workloads.
func (b *bench) setup() (err error) {
	b.store, err = s3local.Start(b.Ctx, s3local.Config{Dir: filepath.Join(b.Base, "s3")})
	if err != nil {
		return err
	}
	b.Defer(func() { b.LogErr("close store", b.store.Close()) })
	if b.pg, err = pgtest.Launch(); err != nil {
		return err
	}
	b.Defer(b.pg.Remove)
	if b.dbURL, err = b.pg.Database("bench"); err != nil {
		return err
	}
	if !b.wants("short") {
		return nil
	}
	pg, err := b.open(sidePG, "pg", "pg/", "short", "")
	if err != nil {
		return err
	}
	peb, err := b.open(sidePebble, "pebble", "pebble/", "", "")
	if err != nil {
		return err
	}
	b.sides = []*server{pg, peb}
	return nil
}

// open opens a server named name over prefix of the bucket, on schema of
// the database (or its own Pebble store if schema is ""), mounted on
// Base/name-mnt; stateDir is its state directory's name ("" for name).
func (b *bench) open(side, name, prefix, schema, stateDir string) (*server, error) {
	st := b.store
	cfg := engine.Config{StateDir: filepath.Join(b.Base, cmpOr(stateDir, name)), Bucket: st.Bucket, Prefix: prefix,
		Endpoint: st.Endpoint, Region: st.Region, AccessKey: st.AccessKey, SecretKey: st.SecretKey,
		ExportDelay: exportDelay, PollInterval: -1, RevalidateTTL: -1}
	if schema != "" {
		cfg.Meta, cfg.MetaSchema = b.dbURL, schema
	}
	in, err := b.Open(cfg, name, benchkit.Serve{Mnt: filepath.Join(b.Base, name+"-mnt")})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	s := &server{side: side, name: name, in: in}
	if schema != "" {
		s.ps = in.Eng.KV.(*postgres.Store)
	}
	return s, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pgVersion is the PostgreSQL version pgtest runs (the newest installed).
func pgVersion() string {
	ents, _ := os.ReadDir("/usr/lib/postgresql")
	var v []string
	for _, e := range ents {
		v = append(v, e.Name())
	}
	return strings.Join(v, ", ")
}

// median is the middle of v, or the mean of the two middle values (NaN
// for none).
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Sorted(slices.Values(v))
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}
