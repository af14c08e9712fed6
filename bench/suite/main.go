// Command suite runs the workloads of issue 5 side by side against bucketfs
// over FUSE and over NFS, a plain local directory, a go-fuse loopback mount
// of a local directory (the ceiling of any FUSE file system here), the raw
// store (parallel ranged GETs, multipart PUTs, plain GetObjects) and the
// peers a user would pick instead, s3fs and rclone mount with its full VFS
// cache, all on the same embedded store on loopback:
//
//	go run ./bench/suite [-quick] [-only 1,2,4] [-skip-peers]
//
// The embedded versitygw store, the bucketfs engine with its FUSE mount and
// NFS server, the loopback file system and the measuring client all run in
// this process; s3fs, rclone and fio are child processes. It prints a table
// of absolute figures and of speed ratios to the local directory, the
// loopback mount and (for reads) the raw store, and writes it with the CPU
// and allocation profiles of the heaviest bucketfs phases to bench/results.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/engine"
)

const (
	exportDelay = time.Hour // nothing is uploaded during a measurement
	ioSize      = 1 << 20   // each sequential read and write
	partSize    = 8 << 20   // each raw multipart part and ranged GET
	rawParallel = 8
	nfsInflight = 8 // NFS READs or WRITEs in flight on one file
)

// sizes are the workloads' parameters; -quick shrinks them.
type sizes struct {
	seq        int64 // workloads 1 and 2
	fresh      int   // workload 3: 16 MiB files
	small      int   // workload 3: 64 KiB files
	creates    int   // workload 4
	untar      int   // workload 5: files in the tree
	rename     int   // workload 6
	fioSize    int64 // workload 7
	fioRuntime time.Duration
	bigDir     int // workload 8
	entries    int // workload 9
}

var (
	fullSizes  = sizes{512 << 20, 50, 200, 2000, 1000, 1000, 256 << 20, 5 * time.Second, 100_000, 1_000_000}
	quickSizes = sizes{128 << 20, 10, 50, 500, 300, 300, 64 << 20, 2 * time.Second, 20_000, 200_000}
)

type suite struct {
	*benchkit.Run // Base holds the state dirs, mount points, local directories
	sz            sizes
	quick         bool
	skipPeers     bool
	only          map[int]bool
	runs          int           // measurements of each target in the repeated workloads
	timeout       time.Duration // per peer measurement of the slow metadata workloads
	bigDirTimeout time.Duration // per peer measurement of workload 8
	current       workload      // the workload running

	eng      *engine.Engine // the main engine; it runs the embedded store
	targets  []*target
	pattern  benchkit.Pattern // the data written and read
	results  []*result
	profiles []string // stems of the profiles written
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == rssChildArg {
		rssChild() // workload 9's child process
		return
	}
	s := &suite{Run: benchkit.New("suite")}
	flag.BoolVar(&s.quick, "quick", false, "small sizes: the whole suite in about 3 minutes")
	only := flag.String("only", "", "comma-separated workload numbers to run (default all: 1-9)")
	flag.BoolVar(&s.skipPeers, "skip-peers", false, "do not install or run s3fs and rclone")
	flag.StringVar(&s.Dir, "dir", "/var/tmp", "parent of the temporary state, mount and local directories")
	flag.StringVar(&s.Out, "out", "bench/results", "directory for the Markdown, JSON and profiles")
	bigDir := flag.Int("bigdir", 0, "objects in workload 8's directory (default 100,000; 20,000 with -quick)")
	entries := flag.Int("entries", 0, "namespace entries of workload 9 (default 1,000,000; 200,000 with -quick)")
	runs := flag.Int("runs", 0, "measurements of each target in workloads 2, 4, 5 and 6, the figure being their median (default 3; 1 with -quick)")
	flag.DurationVar(&s.timeout, "peer-timeout", 60*time.Second, "bound on one peer measurement of workloads 4, 5 and 6")
	flag.DurationVar(&s.bigDirTimeout, "bigdir-timeout", 20*time.Second, "bound on one peer measurement of workload 8")
	flag.Parse()
	s.sz, s.runs = fullSizes, 3
	if s.quick {
		s.sz, s.runs = quickSizes, 1
	}
	s.sz.bigDir, s.sz.entries, s.runs = cmpOr(*bigDir, s.sz.bigDir), cmpOr(*entries, s.sz.entries), cmpOr(*runs, s.runs)
	if s.runs < 1 {
		s.Exit(2, fmt.Errorf("bad -runs %d", s.runs))
	}
	if *only != "" {
		s.only = map[int]bool{}
		for _, w := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 || n > 9 {
				s.Exit(2, fmt.Errorf("bad -only %q (want workload numbers 1-9)", *only))
			}
			s.only[n] = true
		}
	}
	s.Main(s.run) // unmounts, stops the peers and removes the temporary directories at the end
}

func (s *suite) run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	start := time.Now()
	s.pattern = benchkit.NewPattern()
	s.Notes = append(s.Notes,
		fmt.Sprintf("%d CPUs, %s; one process runs the embedded store, the bucketfs engine, its FUSE and NFS servers, the loopback file system and the measuring client; s3fs, rclone and fio are child processes", runtime.NumCPU(), runtime.Version()),
		fmt.Sprintf("export delay %v: bucketfs uploads nothing during a measurement", exportDelay),
		s.runsNote(),
		"ratios are speeds: above 1 is faster than the reference (rates divided, times inverted)")
	if s.quick {
		s.Notes = append(s.Notes, "-quick: reduced sizes (see the config in the JSON); workload 8 uses "+strconv.Itoa(s.sz.bigDir)+" objects, workload 9 "+strconv.Itoa(s.sz.entries)+" entries")
	}
	if err := s.setup(); err != nil {
		return err
	}
	var took []string
	for _, w := range workloads {
		if s.only != nil && !s.only[w.n] {
			continue
		}
		fmt.Fprintf(os.Stderr, "== workload %d: %s\n", w.n, w.name)
		s.current = w
		t0 := time.Now()
		if err := w.run(s); err != nil {
			if s.Ctx.Err() != nil {
				return err
			}
			s.Note("workload %d (%s) stopped: %v", w.n, w.name, err)
			fmt.Fprintf(os.Stderr, "suite: workload %d: %v\n", w.n, err)
		}
		fmt.Fprintf(os.Stderr, "   (%.1f s)\n", time.Since(t0).Seconds())
		took = append(took, fmt.Sprintf("%d: %.0f s", w.n, time.Since(t0).Seconds()))
	}
	for _, t := range s.targets {
		if t.pending != nil {
			s.Note("%s: %.0f s in all waiting after its measurements for its background work to finish (counted in no figure)", t.name, t.settled.Seconds())
		}
	}
	s.Note("the suite took %.0f s (workload %s)", time.Since(start).Seconds(), strings.Join(took, ", "))
	return s.report()
}

// runsNote says which figures are medians of how many runs.
func (s *suite) runsNote() string {
	if s.runs == 1 {
		return "one run each, so expect tens of percent of noise"
	}
	var rep []string
	for _, w := range workloads {
		if w.repeat {
			rep = append(rep, strconv.Itoa(w.n))
		}
	}
	return fmt.Sprintf("workloads %s: each figure is the median of %d runs, the targets measured in turn (run 1 of each, then run 2 ...), each run from a fresh directory or object; every run's value is in the JSON (runs). The other workloads are one run each. Expect tens of percent of noise between runs",
		strings.Join(rep, ", "), s.runs)
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func human(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10))
}

var errSkipped = errors.New("not measured")
