package main

// The short workloads, each through the server on PostgreSQL and the one
// on Pebble: creates, stat, ls -l, untar, sequential write and read.

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/frontend/fuse"
	"bucketfs/internal/kv/postgres"
)

const ioSize = 1 << 20 // each sequential read and write

// short runs the short workloads: each workload's run 1 on both servers,
// then run 2, and so on (the server that goes first alternates), so that
// slow drift of the machine hits both alike.
func (b *bench) short() error {
	tarball, tarFiles, tarSize, err := b.makeTar()
	if err != nil {
		return err
	}
	b.Note("untar: a tar made by the program of %d files (%s of data, 100 B to 16 KiB each) in %d directories two levels deep, extracted with archive/tar: one create, write and close per file, no fsync", tarFiles, benchkit.MiB(tarSize), tarDirs)
	b.Note("stat and ls -l go through a second FUSE mount of the same server, made for each run, whose kernel has seen none of the names: each stat is a LOOKUP that reaches the server (fstatat in the directory, open beforehand); ls -l is getdents and an fstatat of each entry")
	// The directory that ls -l lists, made once on each server (not timed).
	for _, s := range b.sides {
		t0 := time.Now()
		if err := b.makeEmpty(s.in.Mnt, "ls", b.lsEntries); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		b.Note("ls -l: the directory of %d empty files made on %s (4 at a time, not timed) in %.1f s", b.lsEntries, s.side, time.Since(t0).Seconds())
	}
	seqName := "seq write " + benchkit.MiB(b.seq) + " + fsync"
	workloads := []struct {
		row *row
		ops int
		pre func(s *server, run int) error // not timed
		fn  func(s *server, run int) error
	}{
		{row: b.results.row(fmt.Sprintf("create %d x 4 KiB", b.files), "file"), ops: b.files,
			pre: func(s *server, run int) error { return os.MkdirAll(runPath(s, run, "c"), 0o755) },
			fn: func(s *server, run int) error {
				for i := range b.files {
					if err := os.WriteFile(filepath.Join(runPath(s, run, "c"), fmt.Sprintf("f%06d", i)), b.pattern[:4096], 0o644); err != nil {
						return err
					}
				}
				return nil
			}},
		{row: b.results.row(fmt.Sprintf("stat %d files", b.files), "stat"), ops: b.files,
			fn: func(s *server, run int) error {
				return b.inFreshMount(s, fmt.Sprintf("stat%d", run), func(mnt string) error {
					return statEach(filepath.Join(mnt, fmt.Sprintf("r%d", run), "c"), b.files, nil)
				})
			}},
		{row: b.results.row(fmt.Sprintf("ls -l of %d entries", b.lsEntries), "entry"), ops: b.lsEntries,
			fn: func(s *server, run int) error {
				return b.inFreshMount(s, fmt.Sprintf("ls%d", run), func(mnt string) error {
					return lsL(filepath.Join(mnt, "ls"), b.lsEntries)
				})
			}},
		{row: b.results.row(fmt.Sprintf("untar %d files", tarFiles), "file"), ops: tarFiles,
			fn: func(s *server, run int) error { return extract(runPath(s, run, "t"), tarball) }},
		{row: b.results.row(seqName, "MiB"), ops: int(b.seq >> 20),
			pre: func(s *server, run int) error { return os.MkdirAll(runPath(s, run, ""), 0o755) },
			fn:  func(s *server, run int) error { return b.writeSeq(runPath(s, run, "seq")) }},
		{row: b.results.row("seq read "+benchkit.MiB(b.seq)+", page cache dropped", "MiB"), ops: int(b.seq >> 20),
			pre: func(s *server, run int) error { b.DropCaches(); return nil },
			fn:  func(s *server, run int) error { return b.readSeq(runPath(s, run, "seq")) }},
	}
	// The sequential files stay: removing one has the server on PostgreSQL
	// free its 256 MiB of tier data in the background, which would land in
	// the next measurements (and took longer than the operation timeout).
	b.Note("seq: each run writes a new file (1 MiB writes, then fsync), reads it back after dropping the page cache, and leaves it: its unexported data is in the server's metadata store (on PostgreSQL, in the database)")
	defer func() {
		for _, s := range b.sides {
			s.in.Close() // done: nothing of theirs runs during the later parts
		}
	}()
	for _, w := range workloads {
		fmt.Fprintf(os.Stderr, "-- %s\n", w.row.Name)
		for run := range b.runs {
			sides := b.sides
			if run%2 == 1 {
				sides = []*server{b.sides[1], b.sides[0]}
			}
			for _, s := range sides {
				if w.pre != nil {
					if err := w.pre(s, run); err != nil {
						return fmt.Errorf("%s on %s: %w", w.row.Name, s.side, err)
					}
				}
				if err := b.measure(w.row, s, w.ops, func() error { return w.fn(s, run) }); err != nil {
					if b.Ctx.Err() != nil {
						return err
					}
					w.row.miss(s.side, err)
				}
			}
		}
	}
	return nil
}

// runPath is name in the work directory of run on s's mount.
func runPath(s *server, run int, name string) string {
	return filepath.Join(s.in.Mnt, fmt.Sprintf("r%d", run), name)
}

// measure times fn on s, after a sync, as one run of r; on PostgreSQL it
// adds what the database did meanwhile, for ops operations, to r's counts.
func (b *bench) measure(r *row, s *server, ops int, fn func() error) error {
	syscall.Sync()
	var before postgres.Stats
	if s.ps != nil {
		before = s.ps.Stats()
	}
	start := time.Now()
	if err := fn(); err != nil {
		return err
	}
	r.add(s.side, time.Since(start).Seconds())
	if s.ps != nil {
		r.counts(s.side).add(before, s.ps.Stats(), ops)
	}
	return nil
}

// inFreshMount mounts s's file system a second time, on a new directory
// whose kernel caches are empty, runs fn on it and unmounts it.
func (b *bench) inFreshMount(s *server, tag string, fn func(mnt string) error) error {
	mnt := filepath.Join(b.Base, s.name+"-"+tag+"-mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	srv, err := fuse.Mount(s.eng().FS, mnt, fuse.Options{Name: "bucketfs-" + tag})
	if err != nil {
		return err
	}
	unmount := sync.OnceFunc(func() { b.Unmount(mnt, srv.Unmount); os.Remove(mnt) })
	b.Defer(unmount)
	defer unmount()
	return fn(mnt)
}

// statEach lstats the files f000000 ... of dir (or those whose numbers
// pick returns, if not nil) with fstatat in dir, opened first.
func statEach(dir string, n int, pick func(i int) int) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	var st unix.Stat_t
	for i := range n {
		j := i
		if pick != nil {
			j = pick(i)
		}
		if err := unix.Fstatat(fd, fmt.Sprintf("f%06d", j), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %d in %s: %w", j, dir, err)
		}
	}
	return nil
}

// lsL is `ls -l` of dir: its names, then an lstat of each (fstatat in the
// directory); it checks that there are want entries.
func lsL(dir string, want int) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	if len(names) != want {
		return fmt.Errorf("%s lists %d entries, want %d", dir, len(names), want)
	}
	fd := int(d.Fd())
	var st unix.Stat_t
	for _, name := range names {
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s in %s: %w", name, dir, err)
		}
	}
	return nil
}

// makeEmpty makes the directory dir of mnt with n empty files f000000 ...,
// 4 at a time.
func (b *bench) makeEmpty(mnt, dir string, n int) error {
	p := filepath.Join(mnt, dir)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	return benchkit.Striped(4, n, func(i int) error {
		if b.Ctx.Err() != nil {
			return b.Ctx.Err()
		}
		return os.WriteFile(filepath.Join(p, fmt.Sprintf("f%06d", i)), nil, 0o644)
	})
}

// writeSeq writes -size bytes of the pattern to the new file name in
// 1 MiB writes, then fsyncs and closes it.
func (b *bench) writeSeq(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, ioSize)
	for off := int64(0); off < b.seq && err == nil; off += ioSize {
		b.pattern.ReadAt(buf, off)
		_, err = f.Write(buf[:min(ioSize, b.seq-off)])
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// readSeq reads the file name in 1 MiB reads and checks it.
func (b *bench) readSeq(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, ioSize)
	var off int64
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 && !b.pattern.Matches(buf[:n], off) {
			return fmt.Errorf("%s: wrong data in [%d,+%d)", name, off, n)
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if off != b.seq {
		return fmt.Errorf("%s: read %d bytes, want %d", name, off, b.seq)
	}
	return nil
}

// tarDirs is how many directories the untar tree spreads its files over.
const tarDirs = 40

// makeTar makes, in memory, a tar of -untar files of 100 B to 16 KiB of
// the pattern (sizes from a fixed seed) under t/dNN/eNN/, with the
// directories' own entries first.
func (b *bench) makeTar() (data []byte, files int, size int64, err error) {
	rnd := rand.New(rand.NewPCG(23, 6))
	buf := &bytes.Buffer{}
	tw := tar.NewWriter(buf)
	now := time.Now()
	dirOf := func(i int) string { d := i % tarDirs; return fmt.Sprintf("t/d%02d/e%02d/", d/8, d%8) }
	made := map[string]bool{}
	for i := range b.untarFiles {
		dir := dirOf(i)
		parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
		for k := range parts {
			p := strings.Join(parts[:k+1], "/") + "/"
			if made[p] {
				continue
			}
			made[p] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755, ModTime: now}); err != nil {
				return nil, 0, 0, err
			}
		}
		n := 100 + rnd.IntN(16<<10-100)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%sf%04d.txt", dir, i), Mode: 0o644, Size: int64(n), ModTime: now}); err != nil {
			return nil, 0, 0, err
		}
		if _, err := tw.Write(b.pattern[i : i+n]); err != nil {
			return nil, 0, 0, err
		}
		files, size = files+1, size+int64(n)
	}
	return buf.Bytes(), files, size, tw.Close()
}

// extract unpacks the tar into the new directory dir.
func extract(dir string, tarball []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
			continue
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(hdr.Mode))
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
}
