package main

// Workloads 1 to 6 of issue 5: sequential write, cold sequential read,
// fresh and small file read latency, creates with `ls -l`, untar, rename.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
)

type workload struct {
	n      int
	name   string
	run    func(*suite) error
	repeat bool // measured -runs times, the figure being the median
}

// The cheap workloads are repeated; the others cost too much (1: 512 MiB
// written per target; 3: 4 GiB of fresh objects PUT per run), run long
// enough to average out on their own (7, 8) or are not a timing (9).
var workloads = []workload{
	{1, "sequential write + fsync", (*suite).seqWrite, false},
	{2, "cold sequential read of an object PUT through S3", (*suite).coldRead, true},
	{3, "fresh 16 MiB and 64 KiB file read latency", (*suite).latency, false},
	{4, "create 4 KiB files, ls -l, read them", (*suite).creates, true},
	{5, "untar a Go source tree", (*suite).untar, true},
	{6, "rename a directory", (*suite).rename, true},
	{7, "fio 4 KiB random read and write", (*suite).fio, false},
	{8, "ls -l of a big directory of objects", (*suite).bigDir, false},
	{9, "RSS holding a big namespace", (*suite).rss, false},
}

// rounds is how many times each measures every target in the current
// workload.
func (s *suite) rounds() int {
	if s.current.repeat {
		return s.runs
	}
	return 1
}

// runDir is the work directory of workload w's run (from 0): every run
// starts afresh in its own.
func runDir(w, run int) string { return fmt.Sprintf("w%d-run%d", w, run+1) }

// each runs fn for every target that has a file view (and the raw store if
// raw), as the measuring client after a sync, rounds() times: run 0 on
// every target in turn, then run 1, and so on, so that slow drift of the
// machine hits all targets alike. After each measurement it waits for the
// target to finish its background work (settle), which no measurement
// counts. A target's error is recorded on r (if not nil) and the others go
// on. A peer's measurement gets a context bounded by timeout (if not 0); a
// peer that timed out, and a target that is skipped, is not measured again.
func (s *suite) each(r *result, raw bool, timeout time.Duration, fn func(ctx context.Context, t *target, run int) error) error {
	done := map[*target]bool{} // timed out or skipped
	for run := range s.rounds() {
		if s.rounds() > 1 {
			fmt.Fprintf(os.Stderr, "   run %d of %d\n", run+1, s.rounds())
		}
		for _, t := range s.targets {
			if (t.fs == nil && !raw) || done[t] {
				continue
			}
			timedOut, err := s.measure(t, timeout, func(ctx context.Context) error { return fn(ctx, t, run) })
			done[t] = timedOut || errors.Is(err, errSkipped)
			switch {
			case s.Ctx.Err() != nil:
				return s.Ctx.Err()
			case errors.Is(err, errSkipped):
			case err != nil && r != nil:
				why := err.Error()
				if timedOut {
					why = fmt.Sprintf("timeout after %v (%v)", timeout, err)
				}
				r.miss(t.name, why)
			case err != nil:
				s.Note("%s: %v", t.name, err)
			}
			s.settle(t, run)
		}
	}
	return nil
}

func seconds(start time.Time) float64 { return time.Since(start).Seconds() }

// 1: sequential write of -size bytes in 1 MiB writes, then fsync; the raw
// store does one multipart PUT.
func (s *suite) seqWrite() error {
	r := s.row(1, "seq write "+human(s.sz.seq)+" + fsync", "MB/s", true)
	return s.each(r, true, 0, func(ctx context.Context, t *target, _ int) error {
		start := time.Now()
		if t.fs == nil {
			if err := s.putPattern(t.bucket, t.prefix+"w1", s.sz.seq); err != nil {
				return err
			}
			r.set(t.name, float64(s.sz.seq)/1e6/seconds(start))
			return nil
		}
		err := s.profileFUSE(t, "w1-write", func() error { start = time.Now(); return s.writeFile(t.fs, "w1", s.sz.seq, true) })
		if err != nil {
			return err
		}
		r.set(t.name, float64(s.sz.seq)/1e6/seconds(start))
		return nil
	})
}

// putPattern puts size bytes of the pattern at key with one multipart
// upload of 8 MiB parts, 8 at a time.
func (s *suite) putPattern(c *bucket.Client, key string, size int64) error {
	var parts []bucket.Part
	for off := int64(0); off < size; off += partSize {
		parts = append(parts, bucket.Part{Off: off, Len: min(partSize, size-off), Src: s.pattern})
	}
	_, err := c.PutParts(s.Ctx, key, parts, rawParallel, bucket.PutOptions{})
	return err
}

// putters is how many objects or files the workloads' preparation writes
// at once, to spend less time on what is not measured.
const putters = 4

// put puts size bytes of the pattern at key with one PutObject.
func (s *suite) put(c *bucket.Client, key string, size int64) error {
	_, err := c.Put(s.Ctx, key, io.NewSectionReader(s.pattern, 0, size), size, bucket.PutOptions{})
	return err
}

// waitListed waits until dir on t lists n entries (objects PUT through S3
// have reached the file view), up to 15 s.
func (s *suite) waitListed(t *target, dir string, n int) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		t.refreshCache()
		got, err := t.fs.List(s.Ctx, dir)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) || s.Ctx.Err() != nil {
			return fmt.Errorf("%s lists %d of %d entries after 15 s (%v)", dir, got, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mkdirs makes dir and its missing parents on fs.
func mkdirs(fsys fsys, dir string) error {
	for i := range dir {
		if dir[i] == '/' {
			if err := fsys.Mkdir(dir[:i]); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
	}
	if err := fsys.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// getStats returns a function that describes the bucket requests of eng
// since it was called ("" if eng is nil: the target is not bucketfs).
func getStats(eng *engine.Engine) func() string {
	if eng == nil {
		return func() string { return "" }
	}
	before := eng.Bucket.Stats()
	return func() string {
		a := eng.Bucket.Stats()
		return fmt.Sprintf("%d GETs, %d HEADs, %d LISTs, %s read from the bucket",
			a.Get-before.Get, a.Head-before.Head, a.List-before.List, human(int64(a.BytesRead-before.BytesRead)))
	}
}

// 2: a -size object PUT through S3 (one per bucket-backed target and run,
// put just before its read, so no earlier read can have cached it), read
// once in 1 MiB reads after dropping caches; local and loopback read a file
// they wrote; the raw store reads with 8 parallel 8 MiB ranged GETs.
func (s *suite) coldRead() error {
	r := s.row(2, "cold seq read "+human(s.sz.seq), "MB/s", true)
	r.Read = true
	return s.each(r, true, 0, func(ctx context.Context, t *target, run int) error {
		dir := runDir(2, run)
		name := dir + "/object"
		if err := s.coldObject(t, dir, name); err != nil {
			return err
		}
		read := func() error { return s.readFile(t.fs, name, s.sz.seq) }
		if t.fs == nil {
			read = func() error {
				return s.check(benchkit.ReaderFunc(func(p []byte, off int64) (int, error) {
					return t.bucket.ReadAt(s.Ctx, t.prefix+name, "", p, off)
				}), s.sz.seq, partSize, rawParallel)
			}
		}
		s.DropCaches()
		stats := getStats(t.eng)
		var start time.Time
		err := s.profileFUSE(t, "w2-coldread", func() error { start = time.Now(); return read() })
		if err != nil {
			return err
		}
		r.set(t.name, float64(s.sz.seq)/1e6/seconds(start))
		if st := stats(); st != "" {
			s.Note("2: %s cold read (run %d): %s", t.name, run+1, st)
		}
		return nil
	})
}

// coldObject makes the -size object or file name, in the new directory dir
// of t, that workload 2 reads: PUT through S3 (and waited for in the file
// view), or written in a local directory.
func (s *suite) coldObject(t *target, dir, name string) error {
	if t.bucket == nil {
		return errors.Join(t.fs.Mkdir(dir), s.writeFile(t.fs, name, s.sz.seq, true))
	}
	if err := s.putPattern(t.bucket, t.prefix+name, s.sz.seq); err != nil {
		return fmt.Errorf("put %s: %w", t.prefix+name, err)
	}
	if t.fs == nil {
		return nil
	}
	return s.waitListed(t, dir, 1)
}

// 3: the latency of reading whole files one after another: -fresh 16 MiB
// files and -small 64 KiB files PUT through S3 (local and loopback: written
// and then dropped from the page cache), each read once on first access
// (open, read, close), and the small ones once more warm. The raw store
// does one plain GetObject per file.
func (s *suite) latency() error {
	type set struct {
		dir   string
		n     int
		size  int64
		label string
	}
	sets := []set{{"w3/big", s.sz.fresh, 16 << 20, "fresh 16 MiB read"}, {"w3/small", s.sz.small, 64 << 10, "64 KiB read"}}
	for _, t := range s.targets {
		for _, st := range sets {
			if t.bucket == nil {
				break
			}
			err := benchkit.Striped(putters, st.n, func(i int) error {
				return s.put(t.bucket, fmt.Sprintf("%s%s/f%03d", t.prefix, st.dir, i), st.size)
			})
			if err != nil {
				return err
			}
		}
	}
	rows := map[string]*result{}
	for _, st := range sets {
		first := map[bool]string{true: " first", false: ""}[st.size < 1<<20]
		for _, p := range []string{"p50", "p99"} {
			rows[st.dir+p] = s.row(3, st.label+first+" "+p, "ms", false)
			rows[st.dir+p].Read = true
			if st.size < 1<<20 {
				rows[st.dir+"warm"+p] = s.row(3, st.label+" warm "+p, "ms", false)
				rows[st.dir+"warm"+p].Read = true
			}
		}
	}
	return s.each(nil, true, 0, func(ctx context.Context, t *target, _ int) error {
		for _, st := range sets {
			name := func(i int) string { return fmt.Sprintf("%s/f%03d", st.dir, i) }
			read := func(i int) error { return s.readFile(t.fs, name(i), st.size) }
			switch {
			case t.fs == nil:
				read = func(i int) error { return s.getObject(t.bucket, t.prefix+name(i), st.size) }
			case t.bucket != nil:
				if err := s.waitListed(t, st.dir, st.n); err != nil {
					s.Note("3: %s: %v; reading them anyway", t.name, err)
				}
			default:
				if err := mkdirs(t.fs, st.dir); err != nil {
					return err
				}
				for i := range st.n {
					if err := s.writeFile(t.fs, name(i), st.size, false); err != nil {
						return err
					}
				}
			}
			passes := []string{""}
			if st.size < 1<<20 {
				passes = append(passes, "warm")
			}
			s.DropCaches()
			for _, pass := range passes {
				lat := make([]float64, 0, st.n)
				var failed []error
				for i := range st.n {
					start := time.Now()
					if err := read(i); err != nil {
						failed = append(failed, fmt.Errorf("%s: %w", name(i), err))
						continue
					}
					lat = append(lat, seconds(start)*1e3)
				}
				if len(failed) > 0 {
					s.Note("3: %s, %s%s: %d of %d reads failed and are left out, e.g. %v", t.name, st.label, pass, len(failed), st.n, failed[0])
				}
				if len(lat) < st.n/2 {
					rows[st.dir+pass+"p50"].miss(t.name, fmt.Sprintf("%d of %d reads failed", len(failed), st.n))
					continue
				}
				rows[st.dir+pass+"p50"].set(t.name, benchkit.Percentile(lat, 0.50))
				rows[st.dir+pass+"p99"].set(t.name, benchkit.Percentile(lat, 0.99))
			}
		}
		return nil
	})
}

// getObject reads the object at key with one plain GetObject.
func (s *suite) getObject(c *bucket.Client, key string, size int64) error {
	body, _, err := c.Get(s.Ctx, key, "", 0, -1)
	if err != nil {
		return err
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	if err == nil && (int64(len(data)) != size || !s.pattern.Matches(data, 0)) {
		err = fmt.Errorf("get %s: wrong data (%d bytes)", key, len(data))
	}
	return err
}

// 4: -creates files of 4 KiB in a new directory (create, write, close),
// then `ls -l` of it, then every file read back.
func (s *suite) creates() error {
	n := s.sz.creates
	rc := s.row(4, fmt.Sprintf("create %d x 4 KiB", n), "files/s", true)
	rl := s.row(4, fmt.Sprintf("ls -l of those %d", n), "s", false)
	rr := s.row(4, fmt.Sprintf("read those %d", n), "files/s", true)
	return s.each(rc, false, s.timeout, func(ctx context.Context, t *target, run int) error {
		dir := runDir(4, run)
		name := func(i int) string { return fmt.Sprintf("%s/f%05d", dir, i) }
		if err := t.fs.Mkdir(dir); err != nil {
			return err
		}
		start := time.Now()
		err := s.profileFUSE(t, "w4-create", func() error {
			for i := range n {
				if err := s.writeSmall(ctx, t.fs, name(i), 4096); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		rc.set(t.name, float64(n)/seconds(start))
		start = time.Now()
		if got, err := t.fs.List(ctx, dir); err != nil || got != n {
			rl.miss(t.name, fmt.Sprintf("%d entries, %v", got, err))
		} else {
			rl.set(t.name, seconds(start))
		}
		start = time.Now()
		buf := make([]byte, 4096)
		for i := range n {
			if err := s.readSmall(ctx, t.fs, name(i), buf); err != nil {
				rr.miss(t.name, err.Error())
				return nil
			}
		}
		rr.set(t.name, float64(n)/seconds(start))
		return nil
	})
}

// writeSmall creates name with size bytes of the pattern in one write.
func (s *suite) writeSmall(ctx context.Context, fs fsys, name string, size int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	if size > 0 {
		_, err = f.WriteAt(s.pattern[:size], 0)
	}
	return errors.Join(err, f.Close())
}

// readSmall reads len(buf) bytes of name in one read and checks them.
func (s *suite) readSmall(ctx context.Context, fs fsys, name string, buf []byte) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f, err := fs.Open(name)
	if err != nil {
		return err
	}
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF && n == len(buf) {
		err = nil
	}
	if err == nil && !bytes.Equal(buf, s.pattern[:len(buf)]) {
		err = fmt.Errorf("%s: wrong data", name)
	}
	return errors.Join(err, f.Close())
}

// 5: extract a tar of -untar files of the Go toolchain's sources (made
// once) with archive/tar into a new directory.
func (s *suite) untar() error {
	tarball, n, size, err := s.makeTar()
	if err != nil {
		return err
	}
	r := s.row(5, fmt.Sprintf("untar %d files (%s)", n, human(size)), "s", false)
	return s.each(r, false, s.timeout, func(ctx context.Context, t *target, run int) error {
		start := time.Now()
		if err := s.profileFUSE(t, "w5-untar", func() error { return s.extract(ctx, t.fs, runDir(5, run), tarball) }); err != nil {
			return err
		}
		r.set(t.name, seconds(start))
		return nil
	})
}

// makeTar writes the first -untar regular files under the Go toolchain's
// src directory (in walk order, with their directories) to a tar in
// memory.
func (s *suite) makeTar() (data []byte, files int, size int64, err error) {
	root := filepath.Join(runtimeGOROOT(), "src")
	buf := &bytes.Buffer{}
	tw := tar.NewWriter(buf)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || files >= s.sz.untar {
			return cmpErr(err, files >= s.sz.untar)
		}
		rel, _ := filepath.Rel(root, p)
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = path.Join("src", filepath.ToSlash(rel))
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(p)
		if err == nil {
			_, err = tw.Write(content)
		}
		files, size = files+1, size+int64(len(content))
		return err
	})
	if err = errors.Join(err, tw.Close()); err != nil {
		return nil, 0, 0, fmt.Errorf("tar of %s: %w", root, err)
	}
	s.Note("5: the tar holds the first %d regular files (%s) under %s in walk order, with their directories; extracted with archive/tar, one create, write and close per file, no fsync", files, human(size), root)
	return buf.Bytes(), files, size, nil
}

func cmpErr(err error, done bool) error {
	if err == nil && done {
		return filepath.SkipAll
	}
	return err
}

func runtimeGOROOT() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	return "/usr/local/go"
}

// extract unpacks the tar into the new directory dir of fs.
func (s *suite) extract(ctx context.Context, fsys fsys, dir string, tarball []byte) error {
	if err := fsys.Mkdir(dir); err != nil {
		return err
	}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return err
		}
		name := path.Join(dir, hdr.Name)
		if hdr.Typeflag == tar.TypeDir {
			if err := mkdirs(fsys, strings.TrimSuffix(name, "/")); err != nil {
				return err
			}
			continue
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		f, err := fsys.Create(name)
		if err != nil {
			return err
		}
		if len(content) > 0 {
			_, err = f.WriteAt(content, 0)
		}
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
}

// 6: the time of one rename of a directory holding -rename empty files
// (made putters at a time: that is not measured).
func (s *suite) rename() error {
	n := s.sz.rename
	r := s.row(6, fmt.Sprintf("rename dir of %d files", n), "ms", false)
	return s.each(r, false, s.timeout, func(ctx context.Context, t *target, run int) error {
		dir := runDir(6, run)
		if err := errors.Join(t.fs.Mkdir(dir), t.fs.Mkdir(dir+"/a")); err != nil {
			return err
		}
		err := benchkit.Striped(putters, n, func(i int) error { return s.writeSmall(ctx, t.fs, fmt.Sprintf("%s/a/f%05d", dir, i), 0) })
		if err != nil {
			return err
		}
		syscall.Sync()
		start := time.Now()
		if err := t.fs.Rename(dir+"/a", dir+"/b"); err != nil {
			return err
		}
		r.set(t.name, seconds(start)*1e3)
		return nil
	})
}
