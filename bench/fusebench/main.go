// Command fusebench measures bucketfs through a real FUSE mount against a
// plain local directory on the same disk and against raw ranged GETs on the
// same S3 store, and prints absolute numbers and ratios:
//
//	go run ./bench/fusebench [-size 512MiB] [-files 2000] [-runs 1]
//
// Everything runs in this one process: the embedded versitygw store on
// loopback, the engine, its FUSE server and the measured reads and writes.
// Exports are delayed by an hour, so no upload runs during a measurement:
// the numbers are the file side's. Each result is the best of -runs.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
)

const (
	exportDelay = time.Hour
	ioSize      = 1 << 20  // each read and write through the file APIs
	partSize    = 16 << 20 // of the multipart PUT of the cold object
)

type bench struct {
	*benchkit.Run        // Base holds the state dirs, mount points and local dir
	size, chunk          int64
	files, runs, workers int
	cpuprofile           string

	eng     *engine.Engine // the main engine; it runs the embedded store
	mnt     string
	local   string
	pattern benchkit.Pattern // the data written and read
	results []*result
}

// result is one test: the runs of each target ("mount", "local", "raw"),
// the best of each, and the mount's ratio to the others.
type result struct {
	Test   string               `json:"test"`
	Unit   string               `json:"unit"`
	Runs   map[string][]float64 `json:"runs"`
	Best   map[string]float64   `json:"best"`
	Ratios map[string]float64   `json:"ratios"`
}

func main() {
	b := &bench{Run: benchkit.New("fusebench")}
	size := flag.String("size", "512MiB", "bytes of each sequential write and read")
	chunk := flag.String("chunk", "8MiB", "range of each raw GET")
	flag.IntVar(&b.files, "files", 2000, "files of 4 KiB to create")
	flag.IntVar(&b.runs, "runs", 1, "runs of each measurement; the best is reported")
	flag.IntVar(&b.workers, "workers", 8, "parallel raw GETs")
	flag.StringVar(&b.Dir, "dir", "/var/tmp", "parent of the temporary state, mount and local directories")
	flag.StringVar(&b.Out, "out", "bench/results", "directory for the Markdown, JSON and CPU profile")
	flag.StringVar(&b.cpuprofile, "cpuprofile", "", "CPU profile of the first mount read (default in -out)")
	flag.Parse()
	var err error
	if b.size, err = benchkit.ParseSize(*size, "512MiB"); err == nil {
		b.chunk, err = benchkit.ParseSize(*chunk, "512MiB")
	}
	if err == nil && min(b.runs, b.files, b.workers) < 1 {
		err = errors.New("-runs, -files and -workers must be positive")
	}
	if err != nil {
		b.Exit(2, err)
	}
	b.cpuprofile = cmp.Or(b.cpuprofile, filepath.Join(b.Out, "fusebench-"+b.Date+"-read.pprof"))
	b.Main(b.run, &b.cpuprofile) // unmounts and removes the temporary directories at the end
}

func (b *bench) run() error {
	b.local = filepath.Join(b.Base, "local")
	if err := os.Mkdir(b.local, 0o755); err != nil {
		return err
	}
	in, err := b.mount(engine.Config{StateDir: filepath.Join(b.Base, "state")}, "mnt")
	if err != nil {
		return err
	}
	b.eng, b.mnt = in.Eng, in.Mnt
	b.pattern = benchkit.NewPattern()
	b.Notes = append(b.Notes,
		fmt.Sprintf("each result is the best of %d run(s); MB/s is 10^6 bytes/s; file reads and writes are 1 MiB each", b.runs),
		fmt.Sprintf("export delay %v: nothing is uploaded during a measurement, so these are the file side's numbers", exportDelay),
		"one process runs the embedded store, the engine, FUSE and the measured I/O: they share its CPUs")

	// Sequential 1 MiB writes of -size bytes, then fsync.
	err = b.both(b.newResult("seq write "+benchkit.MiB(b.size), "MB/s"), func(dir string, run int) (float64, error) {
		path := filepath.Join(dir, fmt.Sprintf("write-%d", run))
		defer os.Remove(path)
		return b.seqWrite(path)
	})
	if err != nil {
		return err
	}
	// -files files of 4 KiB each in a new directory.
	err = b.both(b.newResult(fmt.Sprintf("create %d x 4 KiB", b.files), "files/s"), func(dir string, run int) (float64, error) {
		return b.create(filepath.Join(dir, fmt.Sprintf("create-%d", run)))
	})
	if err == nil {
		err = b.reads()
	}
	if err != nil {
		return err
	}
	return b.report()
}

// reads: an object PUT through the S3 API, read cold through a fresh engine
// and mount each run, beside raw parallel ranged GETs of it with that
// engine's bucket client and a local file read, each after dropping caches.
func (b *bench) reads() error {
	var parts []bucket.Part
	for off := int64(0); off < b.size; off += partSize {
		parts = append(parts, bucket.Part{Off: off, Len: min(partSize, b.size-off), Src: b.pattern})
	}
	if _, err := b.eng.Bucket.PutParts(b.Ctx, "cold/object", parts, 8, bucket.PutOptions{}); err != nil {
		return err
	}
	r := b.newResult("cold read "+benchkit.MiB(b.size), "MB/s")
	err := b.measure(r, "mount", func(run int) (float64, error) {
		cfg := benchkit.OverStore(b.eng, "cold/")
		cfg.StateDir = filepath.Join(b.Base, fmt.Sprintf("cold-%d", run))
		in, err := b.mount(cfg, fmt.Sprintf("mnt-cold-%d", run))
		if err != nil {
			return 0, err
		}
		defer in.Close()
		eng := in.Eng
		b.DropCaches()
		before := eng.Bucket.Stats()
		if run == 0 {
			f, err := os.Create(b.cpuprofile)
			if err != nil {
				return 0, err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return 0, err
			}
			b.Notes = append(b.Notes, "CPU profile of the whole process during the first mount read: "+b.cpuprofile)
		}
		mbps, err := b.seqRead(filepath.Join(in.Mnt, "object"))
		pprof.StopCPUProfile()
		if err != nil {
			return 0, err
		}
		s := eng.Bucket.Stats()
		b.Notes = append(b.Notes, fmt.Sprintf("mount read run %d: %d GETs, %s from the bucket for a %s file",
			run+1, s.Get-before.Get, benchkit.MiB(int64(s.BytesRead-before.BytesRead)), benchkit.MiB(b.size)))
		b.DropCaches()
		raw, err := b.rawRead(eng.Bucket) // the same client, after the mount read
		r.add("raw", raw)
		return mbps, err
	})
	path := filepath.Join(b.local, "read")
	if err == nil {
		_, err = b.seqWrite(path)
	}
	if err != nil {
		return err
	}
	return b.measure(r, "local", func(int) (float64, error) { b.DropCaches(); return b.seqRead(path) })
}

func (b *bench) newResult(test, unit string) *result {
	r := &result{Test: test, Unit: unit, Runs: map[string][]float64{}, Best: map[string]float64{}, Ratios: map[string]float64{}}
	b.results = append(b.results, r)
	return r
}

func (r *result) add(target string, v float64) {
	r.Runs[target] = append(r.Runs[target], v)
	r.Best[target] = max(r.Best[target], v)
	for _, ref := range []string{"local", "raw"} {
		if r.Best[ref] > 0 {
			r.Ratios["mount/"+ref] = r.Best["mount"] / r.Best[ref]
		}
	}
}

// both measures r on the mount, then on the local directory.
func (b *bench) both(r *result, measure func(dir string, run int) (float64, error)) error {
	err := b.measure(r, "mount", func(run int) (float64, error) { return measure(b.mnt, run) })
	if err != nil {
		return err
	}
	return b.measure(r, "local", func(run int) (float64, error) { return measure(b.local, run) })
}

// measure runs one target of a test -runs times, after a sync each.
func (b *bench) measure(r *result, target string, measure func(run int) (float64, error)) error {
	for run := range b.runs {
		syscall.Sync()
		v, err := measure(run)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", r.Test, target, err)
		}
		r.add(target, v)
	}
	fmt.Fprintf(os.Stderr, "%-22s %-6s %10.1f %s\n", r.Test, target, r.Best[target], r.Unit)
	return nil
}

// mount opens an engine on cfg, mounts it on the new directory name under
// Base and starts it. Closing the instance undoes that; it is also a cleanup.
func (b *bench) mount(cfg engine.Config, name string) (*benchkit.Instance, error) {
	cfg.ExportDelay = exportDelay
	return b.Open(cfg, name, benchkit.Serve{Mnt: filepath.Join(b.Base, name)})
}

func (b *bench) seqWrite(path string) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, ioSize)
	start := time.Now()
	for off := int64(0); off < b.size && b.Ctx.Err() == nil && err == nil; off += ioSize {
		p := buf[:min(ioSize, b.size-off)]
		b.pattern.ReadAt(p, off)
		_, err = f.Write(p)
	}
	err = errors.Join(err, b.Ctx.Err(), f.Sync(), f.Close())
	return benchkit.Rate(b.size, start) / 1e6, err
}

func (b *bench) seqRead(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, ioSize)
	start, off := time.Now(), int64(0)
	for err == nil && b.Ctx.Err() == nil {
		var n int
		n, err = io.ReadFull(f, buf)
		if !b.pattern.Matches(buf[:n], off) {
			return 0, fmt.Errorf("read %s: wrong data in [%d,+%d)", path, off, n)
		}
		off += int64(n)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	if err = cmp.Or(b.Ctx.Err(), err); err == nil && off != b.size {
		err = fmt.Errorf("read %s: %d bytes, want %d", path, off, b.size)
	}
	return benchkit.Rate(off, start) / 1e6, err
}

// rawRead reads the cold object with -workers parallel ranged GETs of -chunk.
func (b *bench) rawRead(c *bucket.Client) (float64, error) {
	start := time.Now()
	err := benchkit.Parallel(b.Ctx, b.size, b.chunk, b.workers, func(off int64, p []byte) error {
		_, err := c.ReadAt(b.Ctx, "object", "", p, off)
		if err == nil && !b.pattern.Matches(p, off) {
			err = fmt.Errorf("raw read: wrong data in [%d,+%d)", off, len(p))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	})
	return benchkit.Rate(b.size, start) / 1e6, err
}

func (b *bench) create(dir string) (float64, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	data := b.pattern[:4096]
	start := time.Now()
	for i := 0; i < b.files && b.Ctx.Err() == nil; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
			return 0, err
		}
	}
	return benchkit.Rate(int64(b.files), start), b.Ctx.Err()
}

// report prints the table and writes it, as Markdown and JSON, to -out.
func (b *bench) report() error {
	head := []string{"test", "mount", "local", fmt.Sprintf("raw S3 (%d x %s GETs)", b.workers, benchkit.MiB(b.chunk)),
		"mount/local", "mount/raw"}
	md := &strings.Builder{}
	fmt.Fprintf(md, "# fusebench %s\n\n", b.Date)
	var rows [][]string
	for _, r := range b.results {
		row := []string{r.Test}
		for _, target := range []string{"mount", "local", "raw"} {
			row = append(row, benchkit.Cell(r.Best, target, "%.1f "+r.Unit))
		}
		rows = append(rows, append(row, benchkit.Cell(r.Ratios, "mount/local", "%.3f"), benchkit.Cell(r.Ratios, "mount/raw", "%.3f")))
	}
	benchkit.Table(md, "|---|--:|--:|--:|--:|--:|", head, rows)
	md.WriteString("\n")
	benchkit.PrintNotes(md, b.Notes)
	return b.WriteResults(md.String(), map[string]any{"date": b.Date, "results": b.results, "notes": b.Notes,
		"config": map[string]any{"size": b.size, "files": b.files, "runs": b.runs, "raw_workers": b.workers,
			"raw_chunk": b.chunk, "export_delay": exportDelay.String(), "dir": b.Base,
			"gomaxprocs": runtime.GOMAXPROCS(0), "go": runtime.Version()}})
}
