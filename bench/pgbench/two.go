package main

// Two servers of one file system on one PostgreSQL database against one
// of them alone, on a create-heavy workload.

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"bucketfs/internal/kv/postgres"
)

const (
	sideOne = "one server"
	sideTwo = "two servers"
)

// twoServers opens servers A and B of one file system (schema two, bucket
// prefix two/), each with its FUSE mount, and has -writers writers each
// create -per-writer files of 4 KiB in a directory of its own: all through
// A, or the first half through A and the others through B. Both servers
// run throughout, so B follows A's changes in both cases. The runs
// alternate which case goes first.
func (b *bench) twoServers() error {
	a, err := b.open(sidePG, "two-a", "two/", "two", "")
	if err != nil {
		return err
	}
	defer a.in.Close()
	bb, err := b.open(sidePG, "two-b", "two/", "two", "")
	if err != nil {
		return err
	}
	defer bb.in.Close()
	total := b.writers * b.perWriter
	r := newRow(fmt.Sprintf("%d writers x %d creates of 4 KiB, each in its own directory", b.writers, b.perWriter), "files/s", true)
	r.Op = "file"
	b.results.Two = append(b.results.Two, r)
	b.Note("two servers: A and B, one file system on schema two of the database, each with its FUSE mount; %d writers (goroutines, one file after another) each create %d files of 4 KiB in a new directory of their own, made through A before the clock starts; one server: every writer on A's mount; two servers: writers 1 to %d on A's, the others on B's; both servers run in both cases", b.writers, b.perWriter, b.writers/2)
	for run := range b.runs {
		cases := []string{sideOne, sideTwo}
		if run%2 == 1 {
			cases = []string{sideTwo, sideOne}
		}
		for _, c := range cases {
			base := fmt.Sprintf("r%d-%s", run, map[string]string{sideOne: "one", sideTwo: "two"}[c])
			mnts := make([]string, b.writers)
			for w := range b.writers {
				if err := os.MkdirAll(filepath.Join(a.in.Mnt, base, fmt.Sprintf("w%d", w)), 0o755); err != nil {
					return err
				}
				mnts[w] = a.in.Mnt
				if c == sideTwo && w >= b.writers/2 {
					mnts[w] = bb.in.Mnt
				}
			}
			syscall.Sync()
			before := []postgres.Stats{a.ps.Stats(), bb.ps.Stats()}
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, b.writers)
			for w := range b.writers {
				wg.Go(func() {
					dir := filepath.Join(mnts[w], base, fmt.Sprintf("w%d", w))
					for i := 0; i < b.perWriter && errs[w] == nil; i++ {
						errs[w] = os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), b.pattern[:4096], 0o644)
					}
				})
			}
			wg.Wait()
			took := time.Since(start).Seconds()
			if err := joinErrs(errs); err != nil {
				r.miss(c, err)
				continue
			}
			r.add(c, float64(total)/took)
			r.counts(c).add(before[0], a.ps.Stats(), total)
			r.counts(c).add(before[1], bb.ps.Stats(), 0)
		}
	}
	return nil
}

func joinErrs(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
