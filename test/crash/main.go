// Command crash is a crash torture program for bucketfs. It checks, from
// outside as a user would, the crash-consistency rules of issue 9: a
// journaled writer runs a random mix of operations on a few files of a
// bucketfs mount, bucketfs is killed with SIGKILL at a random moment (mid
// write, mid export, right after a checkpoint, or once quiet), started
// again on the same state directory, and every file on the mount and
// every object version in the bucket is compared with the states the
// writer knows each file had. The rules are stated where they are checked:
// checkMount (checkmount.go), checkBucketVersions and checkConverged
// (checkbucket.go).
//
// Usage (as root, with fusermount3):
//
//	go run ./test/crash [-rounds 20] [-seed N] [-store embedded|separate|postgres|both|all]
//	                    [-bin PATH] [-keep] [-v] [-plan KIND] [-nocrash]
//
// -plan forces one kind of kill plan (see choosePlan); -nocrash checks the
// checker instead: rounds without a kill, where every file must show
// exactly its last state, followed by the bucket checks.
//
// Every round starts from a fresh state directory (and, with the separate
// store, a fresh store): rounds never continue on an earlier round's state.
// -store postgres is the separate store with the metadata on a PostgreSQL
// server of the round's own (--meta, started from Debian's binaries as
// the tests do); half its rounds kill PostgreSQL too, with bucketfs, and
// half crash PostgreSQL alone while the writer runs (bucketfs stays up).
// "both" is embedded and separate; "all" adds postgres.
// Each round prints its seed; `-seed N -rounds 1 -store MODE` replays the
// round's operations and kill plan (the moment of the kill within the
// plan depends on timing). The exit code is 1 when any round failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is what a run of rounds needs; the flags fill it, and so does the
// Go test.
type config struct {
	bin      string
	rounds   int
	seed     uint64
	stores   []string
	keep     bool
	verbose  bool
	big      bool          // files of 8 to 24 MiB now and then
	maxWrite time.Duration // the writer runs 0.2 s up to this before the kill plan
	workDir  string
	out      io.Writer
	noCrash  bool   // rounds without a kill (see runNoCrash)
	plan     string // only this kind of kill plan (default: drawn per round)
}

// modeResult counts the rounds of one store mode.
type modeResult struct {
	store       string
	passed, run int
	byRule      map[string][]uint64 // seeds of the rounds that broke each rule
	lostFound   int                 // files kept in lost+found, all rounds
}

func main() {
	var (
		cfg        = config{out: os.Stdout, big: true, maxWrite: 3 * time.Second}
		seed       = flag.Int64("seed", -1, "seed of the first round (default: from the clock); round i uses seed+i")
		store      = flag.String("store", "both", "embedded, separate, postgres, both or all")
		serveDir   = flag.String("serve-store", "", "(internal) run the separate store on this directory")
		listenAddr = flag.String("listen", "", "(internal) address of the separate store")
	)
	flag.IntVar(&cfg.rounds, "rounds", 20, "rounds per store mode")
	flag.StringVar(&cfg.bin, "bin", "", "prebuilt bucketfs binary (default: build ./cmd/bucketfs into a temp dir)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the directory (state, store, logs) of a failing round")
	flag.BoolVar(&cfg.verbose, "v", false, "print every round and every violation")
	flag.StringVar(&cfg.plan, "plan", "", "only this kill plan: midWrite, midExport, checkpoint or quiet (default: drawn per round)")
	flag.BoolVar(&cfg.noCrash, "nocrash", false, "check the checker: rounds without a kill (embedded store), where each file must show its last state")
	flag.Parse()
	if *serveDir != "" {
		if err := serveStore(*serveDir, *listenAddr); err != nil {
			fmt.Fprintln(os.Stderr, "serve-store:", err)
			os.Exit(1)
		}
		return
	}
	cfg.seed = uint64(*seed)
	if *seed < 0 {
		cfg.seed = uint64(time.Now().UnixNano() % 1e9)
	}
	switch *store {
	case "both":
		cfg.stores = []string{"embedded", "separate"}
	case "all":
		cfg.stores = []string{"embedded", "separate", "postgres"}
	case "embedded", "separate", "postgres":
		cfg.stores = []string{*store}
	default:
		fmt.Fprintln(os.Stderr, "-store must be embedded, separate, postgres, both or all")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	results, err := runRounds(ctx, &cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(2)
	}
	for _, r := range results {
		if r.passed != r.run {
			os.Exit(1)
		}
	}
}

// runRounds runs cfg.rounds rounds per store mode and prints the report.
func runRounds(ctx context.Context, cfg *config) ([]modeResult, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root (FUSE mounts with allow_other)")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return nil, fmt.Errorf("needs fusermount3 (apt-get install -y fuse3)")
	}
	tmp, err := os.MkdirTemp(cfg.workDir, "bucketfs-crash-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if cfg.workDir == "" {
		cfg.workDir = os.TempDir()
	}
	if cfg.bin == "" {
		cfg.bin = filepath.Join(tmp, "bucketfs")
		fmt.Fprintf(cfg.out, "building bucketfs into %s\n", cfg.bin)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", cfg.bin, "bucketfs/cmd/bucketfs").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	if cfg.noCrash {
		res := modeResult{store: "no crash"}
		for i := range cfg.rounds {
			seed := cfg.seed + uint64(i)
			mount, inBucket, err := runNoCrash(ctx, cfg, seed, cfg.maxWrite)
			if err != nil {
				return nil, fmt.Errorf("seed %d: %w", seed, err)
			}
			res.run++
			if len(mount)+len(inBucket) == 0 {
				res.passed++
			}
			for _, v := range append(mount, inBucket...) {
				printViolation(cfg.out, &roundResult{seed: seed}, v, false)
			}
		}
		fmt.Fprintf(cfg.out, "%s: %d/%d\n", res.store, res.passed, res.run)
		return []modeResult{res}, nil
	}
	var results []modeResult
	for _, store := range cfg.stores {
		res := modeResult{store: store, byRule: map[string][]uint64{}}
		for i := range cfg.rounds {
			if ctx.Err() != nil {
				break
			}
			seed := cfg.seed + uint64(i)
			start := time.Now()
			r := runRound(ctx, cfg, store, seed)
			if ctx.Err() != nil {
				break // interrupted: the round says nothing
			}
			res.run++
			res.lostFound += r.lostFound
			if !r.failed() {
				res.passed++
			}
			seen := map[string]bool{}
			for _, v := range r.violations {
				if !seen[v.rule] {
					seen[v.rule] = true
					res.byRule[v.rule] = append(res.byRule[v.rule], seed)
				}
			}
			if r.err != nil {
				res.byRule["(round error)"] = append(res.byRule["(round error)"], seed)
			}
			report(cfg, store, r, time.Since(start))
		}
		results = append(results, res)
	}
	for _, r := range results {
		fmt.Fprintf(cfg.out, "%s: %d/%d\n", r.store, r.passed, r.run)
		if r.lostFound > 0 {
			fmt.Fprintf(cfg.out, "  crash damage kept in lost+found: %d file(s)\n", r.lostFound)
		}
		rules := slices.Sorted(maps.Keys(r.byRule))
		for _, rule := range rules {
			fmt.Fprintf(cfg.out, "  %-55q broken in %d round(s), seeds %v\n", rule, len(r.byRule[rule]), r.byRule[rule])
		}
	}
	return results, ctx.Err()
}

// report prints one round: a line when it passed (with -v), its first
// violation in detail when it failed.
func report(cfg *config, store string, r *roundResult, took time.Duration) {
	w := cfg.out
	head := fmt.Sprintf("%s round seed=%d (plan: %s; %d steps; %v)", store, r.seed, r.plan, r.steps, took.Round(time.Millisecond))
	if r.lostFound > 0 {
		head += fmt.Sprintf("; crash damage kept in lost+found: %d", r.lostFound)
	}
	outcome := func() {
		if cfg.verbose && r.m != nil && len(r.m.inflightOutcome) > 0 {
			fmt.Fprintf(w, "  %s\n", strings.Join(r.m.inflightOutcome, "\n  "))
		}
	}
	if !r.failed() {
		if cfg.verbose {
			fmt.Fprintf(w, "PASS %s\n", head)
			outcome()
		}
		return
	}
	fmt.Fprintf(w, "FAIL %s\n", head)
	outcome()
	if r.err != nil {
		fmt.Fprintf(w, "  round error: %v\n", r.err)
	}
	if len(r.violations) > 0 {
		fmt.Fprintf(w, "  %d violation(s); the first:\n", len(r.violations))
		printViolation(w, r, r.violations[0], true)
		if cfg.verbose {
			for _, v := range r.violations[1:] {
				printViolation(w, r, v, false)
			}
		}
	}
	if r.keptDir != "" {
		fmt.Fprintf(w, "  kept: %s (report.txt: every violation and the whole journal)\n", r.keptDir)
		writeKeptReport(r)
	}
	fmt.Fprintf(w, "  replay: go run ./test/crash -store %s -seed %d -rounds 1\n", store, r.seed)
}

func printViolation(w io.Writer, r *roundResult, v violation, withSteps bool) {
	file := "-"
	if v.file >= 0 {
		file = fmt.Sprintf("f%d", v.file)
	}
	fmt.Fprintf(w, "  rule %q: seed %d, file %s, name %q\n", v.rule, r.seed, file, v.name)
	if v.note != "" {
		fmt.Fprintf(w, "    %s\n", v.note)
	}
	if v.expected != "" {
		fmt.Fprintf(w, "    expected one of:\n      %s\n", v.expected)
	}
	fmt.Fprintf(w, "    read:\n      %s\n", v.read)
	if withSteps && r.m != nil {
		fmt.Fprintf(w, "    last steps before the kill:\n      %s\n", strings.Join(r.m.lastSteps(8, v.file), "\n      "))
	}
}

// writeKeptReport writes every violation and the whole journal next to
// the kept state of a failing round.
func writeKeptReport(r *roundResult) {
	f, err := os.Create(filepath.Join(r.keptDir, "report.txt"))
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "seed %d, plan: %s\n", r.seed, r.plan)
	if r.err != nil {
		fmt.Fprintf(f, "round error: %v\n", r.err)
	}
	for _, v := range r.violations {
		printViolation(f, r, v, false)
	}
	if r.m == nil {
		return
	}
	fmt.Fprintln(f, "\njournal:")
	for _, s := range r.m.journal {
		fmt.Fprintln(f, "  "+s.String())
	}
	for _, fm := range r.m.files {
		fmt.Fprintf(f, "\nf%d states (last fsync: #%d):\n", fm.id, fm.synced)
		for i := range fm.states {
			fmt.Fprintln(f, "  "+fm.describeState(i))
		}
	}
}
