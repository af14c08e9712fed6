// Command nfsbench measures bucketfs's NFSv4.1 server through the Go client
// of internal/nfsclient, beside Debian's nfs-ganesha (a VFS export of a
// local directory on the same disk) driven by the same client, the FUSE
// mount of the same engine and the raw S3 ceiling of the store:
//
//	go run ./bench/nfsbench [-size 256MiB] [-files 2000] [-inflight 8]
//
// All but ganesha runs in this one process: the embedded versitygw store on
// loopback, the engines with their NFS servers and FUSE mounts, and the
// client. Exports are delayed by an hour, so nothing is uploaded during a
// measurement. Goroutines carry a pprof label "side" (client, bucketfs-nfs,
// fuse, s3-store), so that the CPU profiles of the NFS write and read can be
// cut to the server: go tool pprof -tagfocus=side=bucketfs-nfs.
package main

import (
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
	ioSize      = 1 << 20 // each NFS READ and WRITE, each FUSE read and write
	partSize    = 8 << 20 // each raw multipart part and ranged GET
	rawParallel = 8
)

var (
	targets = []string{"nfs", "ganesha", "fuse", "raw"}
	ratios  = [][2]string{{"nfs", "ganesha"}, {"nfs", "fuse"}, {"nfs", "raw"}, {"fuse", "raw"}}
)

type bench struct {
	*benchkit.Run   // Base holds the state dirs, mount points, ganesha's export
	size            int64
	files, inflight int
	bin             string

	main     *benchkit.Instance // runs the store; its NFS server and FUSE mount share one engine
	nfs, gan *nfsFS             // bucketfs's NFS server on main; ganesha (nil if it did not start)
	fuse     localFS            // a directory on main's FUSE mount
	pattern  benchkit.Pattern   // the data written and read
	results  []*result
}

type result struct {
	Test   string             `json:"test"`
	Unit   string             `json:"unit"`
	Value  map[string]float64 `json:"value"`
	Ratios map[string]float64 `json:"ratios"`
}

type measurement = func() (float64, error)

func main() {
	b := &bench{Run: benchkit.New("nfsbench")}
	size := flag.String("size", "256MiB", "bytes of each sequential write and read")
	flag.IntVar(&b.files, "files", 2000, "files of 4 KiB to create")
	flag.IntVar(&b.inflight, "inflight", 8, "NFS READs or WRITEs in flight, and NFS create workers")
	flag.StringVar(&b.Dir, "dir", "/var/tmp", "parent of the temporary state, mount and export directories")
	flag.StringVar(&b.Out, "out", "bench/results", "directory for the Markdown, JSON and CPU profiles")
	flag.StringVar(&b.bin, "ganesha", "ganesha.nfsd", "the nfs-ganesha server")
	flag.Parse()
	var err error
	if b.size, err = benchkit.ParseSize(*size, "256MiB"); err == nil && min(b.files, b.inflight) < 1 {
		err = errors.New("-files and -inflight must be positive")
	}
	if err != nil {
		b.Exit(2, err)
	}
	b.Main(b.run) // stops ganesha, servers and mounts and removes the temporary directories at the end
}

func (b *bench) run() (err error) {
	b.pattern = benchkit.NewPattern()
	// What this goroutine starts is the client's unless labelled otherwise
	// (pprof.Do on b.Ctx restores b.Ctx's labels).
	b.Ctx = pprof.WithLabels(b.Ctx, pprof.Labels("side", "client"))
	pprof.SetGoroutineLabels(b.Ctx)
	if b.main, err = b.open(engine.Config{}, "main", "s3-store", true, true); err == nil {
		b.fuse = localFS(filepath.Join(b.main.Mnt, "fuse"))
		err = os.Mkdir(string(b.fuse), 0o755)
	}
	if err == nil {
		b.nfs, err = b.dial(b.Ctx, b.main.Addr)
	}
	if err != nil {
		return err
	}
	if err := b.startGanesha(); err != nil {
		fmt.Fprintln(os.Stderr, "nfsbench: ganesha:", err)
		b.Notes = append(b.Notes, "ganesha not measured: "+err.Error())
	}
	b.Notes = append(b.Notes,
		fmt.Sprintf("MB/s is 10^6 bytes/s; one run each; %d CPUs shared by this process (store, engines, NFS servers, FUSE, client) and ganesha", runtime.NumCPU()),
		fmt.Sprintf("NFS: one Go client connection per server (NFSv4.1, AUTH_SYS uid 0); 1 MiB READs and WRITEs, %d in flight; a write is OPEN (create), UNSTABLE WRITEs, COMMIT and CLOSE, all timed; reads are timed from the first READ to the last", b.inflight),
		"FUSE: 1 MiB pwrites one after another, then fsync; 1 MiB preads one after another",
		fmt.Sprintf("NFS create: OPEN (GUARDED create), one UNSTABLE 4 KiB WRITE and CLOSE per file, no COMMIT, %d workers; FUSE create: open, one write, close per file, one after another, no fsync", b.inflight),
		fmt.Sprintf("raw S3: one multipart PUT of %s parts, %d at a time, to cold/object; the cold reads read that object; raw read: %s ranged GETs, %d at a time",
			benchkit.MiB(partSize), rawParallel, benchkit.MiB(partSize), rawParallel),
		fmt.Sprintf("export delay %v: nothing is uploaded during a measurement, so bucketfs writes are the file side's numbers", exportDelay))
	bucketRead := benchkit.ReaderFunc(func(p []byte, off int64) (int, error) {
		return b.main.Eng.Bucket.ReadAt(b.Ctx, "cold/object", "", p, off)
	})
	tests := []struct {
		name, unit string
		run        [4]measurement // by target
	}{
		{"seq write " + benchkit.MiB(b.size), "MB/s", [4]measurement{
			func() (float64, error) {
				return b.profile("write", func() (float64, error) { return b.write(b.nfs, "write", b.inflight) })
			},
			func() (float64, error) { return b.write(b.gan, "write", b.inflight) },
			func() (float64, error) { return b.write(b.fuse, "write", 1) },
			b.rawWrite,
		}},
		{"cold read " + benchkit.MiB(b.size), "MB/s", [4]measurement{
			b.fresh("cold-nfs", true, func(fs fsys) (float64, error) {
				return b.profile("read", func() (float64, error) { return b.read(fs, "object", b.inflight) })
			}),
			func() (float64, error) { b.DropCaches(); return b.read(b.gan, "write", b.inflight) },
			b.fresh("cold-fuse", false, func(fs fsys) (float64, error) { return b.read(fs, "object", 1) }),
			func() (float64, error) { b.DropCaches(); return b.check(bucketRead, partSize, rawParallel) },
		}},
		{fmt.Sprintf("create %d x 4 KiB", b.files), "files/s", [4]measurement{
			func() (float64, error) { return b.create(b.nfs, b.inflight) },
			func() (float64, error) { return b.create(b.gan, b.inflight) },
			func() (float64, error) { return b.create(b.fuse, 1) },
		}},
	}
	for _, t := range tests {
		r := &result{Test: t.name, Unit: t.unit, Value: map[string]float64{}, Ratios: map[string]float64{}}
		b.results = append(b.results, r)
		for i, m := range t.run {
			if m != nil && (targets[i] != "ganesha" || b.gan != nil) {
				if err := b.measure(r, targets[i], m); err != nil {
					return err
				}
			}
		}
	}
	return b.report()
}

// measure runs one target of a test after a sync. A failure on ganesha is
// noted and the run goes on.
func (b *bench) measure(r *result, target string, m measurement) error {
	syscall.Sync()
	v, err := m()
	if err != nil && target == "ganesha" && b.Ctx.Err() == nil {
		b.Notes = append(b.Notes, fmt.Sprintf("%s on ganesha failed: %v", r.Test, err))
		return nil
	} else if err != nil {
		return fmt.Errorf("%s, %s: %w", r.Test, target, err)
	}
	r.Value[target] = v
	for _, q := range ratios {
		if r.Value[q[0]] > 0 && r.Value[q[1]] > 0 {
			r.Ratios[q[0]+"/"+q[1]] = r.Value[q[0]] / r.Value[q[1]]
		}
	}
	fmt.Fprintf(os.Stderr, "%-22s %-8s %10.1f %s\n", r.Test, target, v, r.Unit)
	return nil
}

// profile writes a CPU profile of the whole process while m runs.
func (b *bench) profile(phase string, m measurement) (float64, error) {
	name := filepath.Join(b.Out, "nfsbench-"+b.Date+"-"+phase+".pprof")
	w, err := os.Create(name)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	if err := pprof.StartCPUProfile(w); err != nil {
		return 0, err
	}
	defer pprof.StopCPUProfile()
	b.Notes = append(b.Notes, "CPU profile of the process during the bucketfs NFS "+phase+", labelled by side: "+name)
	return m()
}

// write writes -size bytes to the new file name, workers writes at a time,
// then syncs and closes it.
func (b *bench) write(fs fsys, name string, workers int) (float64, error) {
	start := time.Now()
	f, err := fs.Open(name, true)
	if err != nil {
		return 0, err
	}
	err = benchkit.Parallel(b.Ctx, b.size, ioSize, workers, func(off int64, buf []byte) error {
		b.pattern.ReadAt(buf, off)
		_, err := f.WriteAt(buf, off)
		return err
	})
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	return benchkit.Rate(b.size, start) / 1e6, err
}

// read reads the file name, workers reads at a time, and checks it.
func (b *bench) read(fs fsys, name string, workers int) (float64, error) {
	f, err := fs.Open(name, false)
	if err != nil {
		return 0, err
	}
	v, err := b.check(f, ioSize, workers)
	return v, errors.Join(err, f.Close())
}

// check reads -size bytes of f in chunks, workers at a time, and compares
// them with the pattern.
func (b *bench) check(f io.ReaderAt, chunk int64, workers int) (float64, error) {
	start := time.Now()
	err := benchkit.Parallel(b.Ctx, b.size, chunk, workers, func(off int64, buf []byte) error {
		n, err := f.ReadAt(buf, off)
		if err == io.EOF && n == len(buf) {
			err = nil
		}
		if err == nil && !b.pattern.Matches(buf, off) {
			err = fmt.Errorf("read: wrong data in [%d,+%d)", off, len(buf))
		}
		return err
	})
	return benchkit.Rate(b.size, start) / 1e6, err
}

// create makes -files files of 4 KiB in a new directory, workers at a time.
func (b *bench) create(fs fsys, workers int) (float64, error) {
	if err := fs.Mkdir("create"); err != nil {
		return 0, err
	}
	start := time.Now()
	err := benchkit.Parallel(b.Ctx, int64(b.files), 1, workers, func(i int64, _ []byte) error {
		f, err := fs.Open(fmt.Sprintf("create/f%05d", i), true)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(b.pattern[:4096], 0)
		return errors.Join(err, f.Close())
	})
	return benchkit.Rate(int64(b.files), start), err
}

// rawWrite puts cold/object with a multipart upload, which the cold reads read.
func (b *bench) rawWrite() (float64, error) {
	var parts []bucket.Part
	for off := int64(0); off < b.size; off += partSize {
		parts = append(parts, bucket.Part{Off: off, Len: min(partSize, b.size-off), Src: b.pattern})
	}
	start := time.Now()
	_, err := b.main.Eng.Bucket.PutParts(b.Ctx, "cold/object", parts, rawParallel, bucket.PutOptions{})
	return benchkit.Rate(b.size, start) / 1e6, err
}

// report prints the table and writes it, as Markdown and JSON, to -out.
func (b *bench) report() error {
	head := []string{"test", "bucketfs NFS", "ganesha NFS", "bucketfs FUSE", "raw S3"}
	for _, q := range ratios {
		head = append(head, q[0]+"/"+q[1])
	}
	md := &strings.Builder{}
	fmt.Fprintf(md, "# nfsbench %s\n\n", b.Date)
	var rows [][]string
	for _, r := range b.results {
		row := []string{r.Test}
		for _, t := range targets {
			row = append(row, benchkit.Cell(r.Value, t, "%.1f "+r.Unit))
		}
		for _, q := range ratios {
			row = append(row, benchkit.Cell(r.Ratios, q[0]+"/"+q[1], "%.3f"))
		}
		rows = append(rows, row)
	}
	benchkit.Table(md, "|---"+strings.Repeat("|--:", len(head)-1)+"|", head, rows)
	md.WriteString("\n")
	benchkit.PrintNotes(md, b.Notes)
	return b.WriteResults(md.String(), map[string]any{"date": b.Date, "results": b.results, "notes": b.Notes,
		"config": map[string]any{"size": b.size, "files": b.files, "inflight": b.inflight, "io_size": ioSize,
			"raw_part": partSize, "raw_parallel": rawParallel, "export_delay": exportDelay.String(),
			"dir": b.Base, "cpus": runtime.NumCPU(), "go": runtime.Version()}})
}
