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
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
	"bucketfs/internal/frontend/fuse"
)

const (
	exportDelay = time.Hour
	ioSize      = 1 << 20  // each read and write through the file APIs
	partSize    = 16 << 20 // of the multipart PUT of the cold object
)

type bench struct {
	ctx                  context.Context
	size, chunk          int64
	files, runs, workers int
	dir, out, cpuprofile string

	base    string         // holds the state dirs, mount points and local dir
	eng     *engine.Engine // the main engine; it runs the embedded store
	mnt     string
	local   string
	pattern []byte // the data written and read, repeated
	results []*result
	notes   []string
	undo    []func() // cleanups, run last first
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
	b := &bench{}
	size := flag.String("size", "512MiB", "bytes of each sequential write and read")
	chunk := flag.String("chunk", "8MiB", "range of each raw GET")
	flag.IntVar(&b.files, "files", 2000, "files of 4 KiB to create")
	flag.IntVar(&b.runs, "runs", 1, "runs of each measurement; the best is reported")
	flag.IntVar(&b.workers, "workers", 8, "parallel raw GETs")
	flag.StringVar(&b.dir, "dir", "/var/tmp", "parent of the temporary state, mount and local directories")
	flag.StringVar(&b.out, "out", "bench/results", "directory for the Markdown, JSON and CPU profile")
	flag.StringVar(&b.cpuprofile, "cpuprofile", "", "CPU profile of the first mount read (default in -out)")
	flag.Parse()
	os.Unsetenv("AWS_CA_BUNDLE") // it breaks the bucket client
	var err error
	if b.size, err = parseSize(*size); err == nil {
		b.chunk, err = parseSize(*chunk)
	}
	if err == nil && min(b.runs, b.files, b.workers) < 1 {
		err = errors.New("-runs, -files and -workers must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fusebench:", err)
		os.Exit(2)
	}
	var stop context.CancelFunc
	b.ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.run(); err != nil {
		fmt.Fprintln(os.Stderr, "fusebench:", err)
		os.Exit(1)
	}
}

func (b *bench) run() (err error) {
	defer b.cleanup() // unmounts and removes the temporary directories
	date := time.Now().Format("2006-01-02")
	b.cpuprofile = cmp.Or(b.cpuprofile, filepath.Join(b.out, "fusebench-"+date+"-read.pprof"))
	// The embedded store chdirs the process: make every path absolute first.
	for _, p := range []*string{&b.dir, &b.out, &b.cpuprofile} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if b.base, err = os.MkdirTemp(b.dir, "fusebench-"); err != nil {
		return err
	}
	b.undo = append(b.undo, func() { os.RemoveAll(b.base) })
	b.local = filepath.Join(b.base, "local")
	if err := errors.Join(os.MkdirAll(b.out, 0o755), os.Mkdir(b.local, 0o755)); err != nil {
		return err
	}
	if b.eng, b.mnt, _, err = b.mount(engine.Config{StateDir: filepath.Join(b.base, "state")}, "mnt"); err != nil {
		return err
	}
	b.pattern = make([]byte, ioSize+4093) // a period that no I/O size divides
	rand.NewChaCha8([32]byte{1}).Read(b.pattern)
	b.notes = append(b.notes,
		fmt.Sprintf("each result is the best of %d run(s); MB/s is 10^6 bytes/s; file reads and writes are 1 MiB each", b.runs),
		fmt.Sprintf("export delay %v: nothing is uploaded during a measurement, so these are the file side's numbers", exportDelay),
		"one process runs the embedded store, the engine, FUSE and the measured I/O: they share its CPUs")

	// Sequential 1 MiB writes of -size bytes, then fsync.
	err = b.both(b.newResult("seq write "+human(b.size), "MB/s"), func(dir string, run int) (float64, error) {
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
	return b.report(date)
}

// reads: an object PUT through the S3 API, read cold through a fresh engine
// and mount each run, beside raw parallel ranged GETs of it with that
// engine's bucket client and a local file read, each after dropping caches.
func (b *bench) reads() error {
	var parts []bucket.Part
	for off := int64(0); off < b.size; off += partSize {
		parts = append(parts, bucket.Part{Off: off, Len: min(partSize, b.size-off), Src: b})
	}
	if _, err := b.eng.Bucket.PutParts(b.ctx, "cold/object", parts, 8, bucket.PutOptions{}); err != nil {
		return err
	}
	r := b.newResult("cold read "+human(b.size), "MB/s")
	err := b.measure(r, "mount", func(run int) (float64, error) {
		st := b.eng.Store
		eng, mnt, unmount, err := b.mount(engine.Config{StateDir: filepath.Join(b.base, fmt.Sprintf("cold-%d", run)),
			Bucket: st.Bucket, Prefix: "cold/", Endpoint: st.Endpoint, Region: st.Region,
			AccessKey: st.AccessKey, SecretKey: st.SecretKey}, fmt.Sprintf("mnt-cold-%d", run))
		if err != nil {
			return 0, err
		}
		defer unmount()
		b.dropCaches()
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
			b.notes = append(b.notes, "CPU profile of the whole process during the first mount read: "+b.cpuprofile)
		}
		mbps, err := b.seqRead(filepath.Join(mnt, "object"))
		pprof.StopCPUProfile()
		if err != nil {
			return 0, err
		}
		s := eng.Bucket.Stats()
		b.notes = append(b.notes, fmt.Sprintf("mount read run %d: %d GETs, %s from the bucket for a %s file",
			run+1, s.Get-before.Get, human(int64(s.BytesRead-before.BytesRead)), human(b.size)))
		b.dropCaches()
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
	return b.measure(r, "local", func(int) (float64, error) { b.dropCaches(); return b.seqRead(path) })
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

// mount opens an engine on cfg, mounts it on a new directory under base and
// starts it. The returned function undoes that; it is also a cleanup.
func (b *bench) mount(cfg engine.Config, name string) (*engine.Engine, string, func(), error) {
	cfg.ExportDelay = exportDelay
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mnt := filepath.Join(b.base, name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, "", nil, err
	}
	eng, err := engine.Open(b.ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	srv, err := fuse.Mount(eng.FS, mnt, fuse.Options{})
	if err != nil {
		eng.Close()
		return nil, "", nil, err
	}
	eng.Start()
	undo := sync.OnceFunc(func() {
		if err := srv.Unmount(); err != nil {
			fmt.Fprintf(os.Stderr, "fusebench: unmount %s: %v; detaching it\n", mnt, err)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		if err := eng.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "fusebench: close engine:", err)
		}
	})
	b.undo = append(b.undo, undo)
	return eng, mnt, undo, nil
}

func (b *bench) seqWrite(path string) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, ioSize)
	start := time.Now()
	for off := int64(0); off < b.size && b.ctx.Err() == nil && err == nil; off += ioSize {
		p := buf[:min(ioSize, b.size-off)]
		b.ReadAt(p, off)
		_, err = f.Write(p)
	}
	err = errors.Join(err, b.ctx.Err(), f.Sync(), f.Close())
	return rate(b.size, start) / 1e6, err
}

func (b *bench) seqRead(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf, want := make([]byte, ioSize), make([]byte, ioSize)
	start, off := time.Now(), int64(0)
	for err == nil && b.ctx.Err() == nil {
		var n int
		n, err = io.ReadFull(f, buf)
		b.ReadAt(want[:n], off)
		if !bytes.Equal(buf[:n], want[:n]) {
			return 0, fmt.Errorf("read %s: wrong data in [%d,+%d)", path, off, n)
		}
		off += int64(n)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	if err = cmp.Or(b.ctx.Err(), err); err == nil && off != b.size {
		err = fmt.Errorf("read %s: %d bytes, want %d", path, off, b.size)
	}
	return rate(off, start) / 1e6, err
}

// rawRead reads the cold object with -workers parallel ranged GETs of -chunk.
func (b *bench) rawRead(c *bucket.Client) (float64, error) {
	ctx, cancel := context.WithCancelCause(b.ctx)
	defer cancel(nil)
	offs := make(chan int64, b.size/b.chunk+1)
	for off := int64(0); off < b.size; off += b.chunk {
		offs <- off
	}
	close(offs)
	var wg sync.WaitGroup
	start := time.Now()
	for range b.workers {
		wg.Go(func() {
			buf, want := make([]byte, b.chunk), make([]byte, b.chunk)
			for off := range offs {
				p := buf[:min(b.chunk, b.size-off)]
				_, err := c.ReadAt(ctx, "object", "", p, off)
				b.ReadAt(want[:len(p)], off)
				if err == nil && !bytes.Equal(p, want[:len(p)]) {
					err = fmt.Errorf("raw read: wrong data in [%d,+%d)", off, len(p))
				}
				if err != nil && !errors.Is(err, io.EOF) {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	return rate(b.size, start) / 1e6, context.Cause(ctx)
}

func (b *bench) create(dir string) (float64, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	data := b.pattern[:4096]
	start := time.Now()
	for i := 0; i < b.files && b.ctx.Err() == nil; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
			return 0, err
		}
	}
	return rate(int64(b.files), start), b.ctx.Err()
}

// ReadAt fills p with the data at off: the pattern, repeated. It is the
// source of the cold object's multipart upload.
func (b *bench) ReadAt(p []byte, off int64) (int, error) {
	for n := 0; n < len(p); {
		n += copy(p[n:], b.pattern[(off+int64(n))%int64(len(b.pattern)):])
	}
	return len(p), nil
}

// dropCaches empties the page cache so that the next read comes from disk.
func (b *bench) dropCaches() {
	syscall.Sync()
	err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
	if msg := fmt.Sprint("could not drop caches, so reads may be warm: ", err); err != nil && !slices.Contains(b.notes, msg) {
		b.notes = append(b.notes, msg)
	}
}

func (b *bench) cleanup() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i]()
	}
}

// report prints the table and writes it, as Markdown and JSON, to -out.
func (b *bench) report(date string) error {
	head := []string{"test", "mount", "local", fmt.Sprintf("raw S3 (%d x %s GETs)", b.workers, human(b.chunk)),
		"mount/local", "mount/raw"}
	md := &strings.Builder{}
	fmt.Fprintf(md, "# fusebench %s\n\n| %s |\n|---|--:|--:|--:|--:|--:|\n", date, strings.Join(head, " | "))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range b.results {
		row := []string{r.Test}
		for _, target := range []string{"mount", "local", "raw"} {
			row = append(row, cell(r.Best, target, "%.1f "+r.Unit))
		}
		row = append(row, cell(r.Ratios, "mount/local", "%.3f"), cell(r.Ratios, "mount/raw", "%.3f"))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		fmt.Fprintf(md, "| %s |\n", strings.Join(row, " | "))
	}
	tw.Flush()
	md.WriteString("\n")
	for _, n := range b.notes {
		fmt.Println("-", n)
		fmt.Fprintf(md, "- %s\n", n)
	}
	js, err := json.MarshalIndent(map[string]any{"date": date, "results": b.results, "notes": b.notes,
		"config": map[string]any{"size": b.size, "files": b.files, "runs": b.runs, "raw_workers": b.workers,
			"raw_chunk": b.chunk, "export_delay": exportDelay.String(), "dir": b.base,
			"gomaxprocs": runtime.GOMAXPROCS(0), "go": runtime.Version()}}, "", "  ")
	if err != nil {
		return err
	}
	stem := filepath.Join(b.out, "fusebench-"+date)
	fmt.Printf("wrote %s.md and %s.json\n", stem, stem)
	return errors.Join(os.WriteFile(stem+".md", []byte(md.String()), 0o644),
		os.WriteFile(stem+".json", append(js, '\n'), 0o644))
}

func cell(m map[string]float64, key, format string) string {
	if v, ok := m[key]; ok {
		return fmt.Sprintf(format, v)
	}
	return "-"
}

func rate(n int64, start time.Time) float64 { return float64(n) / time.Since(start).Seconds() }

func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGiB")
	unit := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[s[len(num):]]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || unit == 0 || n < 1 {
		return 0, fmt.Errorf("bad size %q (want e.g. 512MiB)", s)
	}
	return n * unit, nil
}

func human(n int64) string { return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20)) }
