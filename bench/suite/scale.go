package main

// Workloads 7 to 9: fio random 4 KiB I/O, a big directory of objects, and
// the RSS of a bucketfs process holding a big namespace.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/engine"
	"bucketfs/internal/meta"
)

// 7: fio 4 KiB random reads, then writes, with psync and the page cache,
// 1 job and 16 jobs sharing one -fio-size file, on every target that is a
// directory (not NFS: no kernel client here; not the raw store).
func (s *suite) fio() error {
	if err := s.install("fio", "fio"); err != nil {
		return err
	}
	s.Note("7: fio --ioengine=psync --direct=0 --invalidate=0 --bs=4k --size=%s --runtime=%v --time_based, one file shared by the jobs, written by the suite in 1 MiB writes before the first (random read) run; a peer is left to finish uploading that file before its first job (not between its own jobs); reads are warm where the page cache keeps the file", human(s.sz.fioSize), s.sz.fioRuntime)
	type job struct {
		rw   string
		jobs int
	}
	var rows []*result
	jobs := []job{{"randread", 1}, {"randread", 16}, {"randwrite", 1}, {"randwrite", 16}}
	for _, j := range jobs {
		rows = append(rows, s.row(7, fmt.Sprintf("fio 4 KiB %s, %d job(s)", j.rw, j.jobs), "IOPS", true))
	}
	return s.each(rows[0], false, 0, func(ctx context.Context, t *target, _ int) error {
		if t.dir == "" {
			return errSkipped
		}
		// fio would lay the file out in 4 KiB writes, slower on FUSE than a
		// run; the suite writes it in 1 MiB ones.
		if err := errors.Join(t.fs.Mkdir("w7"), s.writeFile(t.fs, "w7/file", s.sz.fioSize, false)); err != nil {
			return err
		}
		// A peer uploads the file the suite wrote before its first job; its
		// later jobs run beside the uploads of its own earlier writes, as
		// they would for a user (the suite settles it before the next target).
		s.settle(t, 0)
		for i, j := range jobs {
			var iops float64
			err := s.profileFUSE(t, fmt.Sprintf("w7-%s-%d", j.rw, j.jobs), func() (err error) {
				iops, err = s.runFio(filepath.Join(t.dir, "w7"), j.rw, j.jobs)
				return err
			})
			if err != nil {
				rows[i].miss(t.name, err.Error())
				continue
			}
			rows[i].set(t.name, iops)
		}
		return nil
	})
}

// runFio runs one fio job and returns its IOPS.
func (s *suite) runFio(dir, rw string, jobs int) (float64, error) {
	cmd := exec.CommandContext(s.Ctx, "fio", "--name=w7", "--directory="+dir, "--filename=file",
		"--size="+strconv.FormatInt(s.sz.fioSize, 10), "--bs=4k", "--ioengine=psync", "--direct=0", "--invalidate=0",
		"--rw="+rw, "--numjobs="+strconv.Itoa(jobs), "--runtime="+strconv.Itoa(int(s.sz.fioRuntime.Seconds())),
		"--time_based", "--group_reporting", "--output-format=json")
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + lastLines(string(ee.Stderr), 3)
		}
		return 0, errors.New(msg)
	}
	var res struct {
		Jobs []struct {
			Read, Write struct {
				IOPS float64 `json:"iops"`
			}
		} `json:"jobs"`
	}
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:] // fio prints notes before the JSON
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		return 0, fmt.Errorf("fio output: %v: %.200s", err, out)
	}
	return res.Jobs[0].Read.IOPS + res.Jobs[0].Write.IOPS, nil
}

// 8: a directory of -bigdir objects: `ls -l` on first access, then warm,
// and the stat of one entry on first access of another such directory. The
// objects are empty files made straight in the embedded store's data
// directory (versitygw serves a file there as an object), local and
// loopback's in loopback's source directory; targets that keep separate
// caches share them (bigDirPlace). All are made before the first
// measurement, so that a peer's -bigdir-timeout bounds its listing only;
// the page cache is dropped before each target.
func (s *suite) bigDir() error {
	n := s.sz.bigDir
	rs := s.row(8, fmt.Sprintf("stat 1 of %d, first access", n), "ms", false)
	rf := s.row(8, fmt.Sprintf("ls -l of %d, first access", n), "s", false)
	rw := s.row(8, fmt.Sprintf("ls -l of %d, warm", n), "s", false)
	data := filepath.Join(s.eng.Store.Dir, "data")
	s.Note("8: %d empty objects made (mknod) as files in the store's data directory (%s), as versitygw serves them; bucketfs FUSE and NFS list the same objects, each through a fresh engine (its own state) over the prefix w8/ of the bucket, s3fs and rclone the same objects under w8/ of theirs; local lists the files that loopback serves, without FUSE; peers are bounded by -bigdir-timeout %v", n, data, s.bigDirTimeout)
	if err := s.makeBigDirs(n); err != nil {
		return err
	}
	return s.each(rf, true, s.bigDirTimeout, func(ctx context.Context, t *target, _ int) error {
		if t.fs == nil {
			return s.rawListing(ctx, t, rf, n)
		}
		_, fs, dir := s.bigDirPlace(t)
		var eng *engine.Engine // a fresh bucketfs engine, for its bucket requests
		if t.isBucketfs() {
			fresh, freshEng, closeFresh, err := t.fresh("w8/", "w8-"+strings.Fields(t.name)[1])
			if err != nil {
				return err
			}
			defer closeFresh()
			fs, eng = fresh, freshEng
		}
		t.refreshCache()
		s.DropCaches()
		stats := getStats(eng)
		for _, r := range []*result{rf, rw} {
			start := time.Now()
			got, err := fs.List(ctx, dir)
			if err == nil && got != n {
				err = fmt.Errorf("listed %d entries, want %d", got, n)
			}
			if err != nil {
				return err
			}
			r.set(t.name, seconds(start))
		}
		if st := stats(); st != "" {
			s.Note("8: %s, ls -l first access and warm: %s", t.name, st)
		}
		start := time.Now()
		if err := fs.Stat(fmt.Sprintf("%ss/f%07d", dir, n/2)); err != nil {
			rs.miss(t.name, err.Error())
		} else {
			rs.set(t.name, seconds(start)*1e3)
		}
		return nil
	})
}

// rawListing is the store's share of a first ls -l: what bucketfs asks of
// it, with the same client, and nothing else: every LIST page of bucketfs's
// copy of the directory, one after another, and a HEAD of each object, 32
// at a time, as the importer does.
func (s *suite) rawListing(ctx context.Context, t *target, r *result, n int) error {
	const prefix, heads = "w8/w8/", 32
	start := time.Now()
	keys, token := 0, ""
	for {
		page, err := t.bucket.List(ctx, prefix, token, 1000)
		if err != nil {
			return err
		}
		objs := page.Objects
		if err := benchkit.Striped(heads, len(objs), func(i int) error {
			_, err := t.bucket.Head(ctx, objs[i].Key, "")
			return err
		}); err != nil {
			return err
		}
		keys += len(objs)
		if !page.Truncated || page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	if keys != n {
		return fmt.Errorf("listed %d objects, want %d", keys, n)
	}
	r.set(t.name, seconds(start))
	return nil
}

// bigDirPlace says where workload 8's directory for t is made (src, in
// the local file system) and where t lists it (dir in fs; bucketfs lists
// it through a fresh engine instead). Targets with separate caches share
// one copy, as making the files is most of the workload's time: bucketfs
// FUSE and NFS (the prefix w8/ of the bucket), the two peers (w8/ at the
// root of their bucket, outside their work areas), and local and loopback
// (local lists loopback's source directory, without FUSE).
func (s *suite) bigDirPlace(t *target) (src string, fs fsys, dir string) {
	data := filepath.Join(s.eng.Store.Dir, "data")
	loopbackSrc := filepath.Join(s.Base, "loopback-src")
	switch {
	case t.isBucketfs():
		return filepath.Join(data, s.eng.Store.Bucket, "w8", "w8"), nil, "w8"
	case t.isPeer():
		return filepath.Join(data, peerBucket, "w8", "w8"), dirFS(filepath.Dir(t.dir)), "w8/w8"
	case t.name == tLocal:
		return filepath.Join(loopbackSrc, "w8"), dirFS(loopbackSrc), "w8"
	}
	return filepath.Join(loopbackSrc, "w8"), t.fs, "w8" // go-fuse loopback
}

// makeBigDirs makes workload 8's directories for every target with a file
// view: dir for ls -l and dir+"s" for the stat, each with n empty files.
// They are made a few at a time, each by one goroutine: creates in one
// directory contend for its lock.
func (s *suite) makeBigDirs(n int) error {
	var dirs []string
	for _, t := range s.targets {
		if src, _, _ := s.bigDirPlace(t); t.fs != nil && !slices.Contains(dirs, src) {
			dirs = append(dirs, src, src+"s")
		}
	}
	return benchkit.Striped(runtime.NumCPU(), len(dirs), func(i int) error { return makeFiles(dirs[i], n) })
}

// makeFiles makes the directory dir (and its parents) with n empty files,
// with mknod: one system call a file.
func makeFiles(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range n {
		if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("f%07d", i)), syscall.S_IFREG|0o644, 0); err != nil {
			return err
		}
	}
	return nil
}

const rssChildArg = "-rss-child"

// listers is how many directories workload 9 lists through the mount at
// once: the end state is the same as one at a time, in less time.
const listers = 4

// 9: the RSS of a child process (this program) running an engine with a
// FUSE mount whose namespace holds -entries files of 4 KiB (made with
// meta.Create, 10,000 a directory), after listing every directory through
// the mount (listers at a time).
func (s *suite) rss() error {
	r := s.row(9, fmt.Sprintf("RSS with %d entries", s.sz.entries), "MB", false)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.Base, "rss")
	cmd := exec.CommandContext(s.Ctx, exe, rssChildArg, strconv.Itoa(s.sz.entries), dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		r.miss("bucketfs FUSE", err.Error())
		return nil
	}
	var res map[string]float64
	if err := json.Unmarshal([]byte(lastLines(string(out), 1)), &res); err != nil {
		return fmt.Errorf("child output %q: %w", out, err)
	}
	r.set(tFUSE, res["rss_listed"])
	s.Note("9: child process with the embedded store, an engine and a FUSE mount: VmRSS %.0f MB before the namespace, %.0f MB after creating %d entries (%.1f s), %.0f MB after listing every directory through the mount, %d at a time (%.1f s); VmHWM %.0f MB; Go heap in use %.0f MB",
		res["rss_empty"], res["rss_built"], s.sz.entries, res["build_s"], res["rss_listed"], listers, res["list_s"], res["hwm"], res["heap"])
	return nil
}

// rssChild is workload 9's child: os.Args are [exe, rssChildArg, entries,
// dir]. It prints its measurements as JSON.
func rssChild() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "suite rss child:", err); os.Exit(1) }
	if len(os.Args) != 4 {
		fail(errors.New("usage: suite -rss-child ENTRIES DIR"))
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail(err)
	}
	dir, _ := filepath.Abs(os.Args[3])
	ctx := context.Background()
	r := benchkit.New("suite")
	r.Ctx = ctx
	defer r.Cleanup() // unmounts and closes the engine
	mnt := filepath.Join(dir, "mnt")
	in, err := r.Open(engine.Config{StateDir: filepath.Join(dir, "state"), ExportDelay: exportDelay}, "rss", benchkit.Serve{Mnt: mnt})
	if err != nil {
		fail(err)
	}
	eng := in.Eng
	res := map[string]float64{"rss_empty": vmStat("VmRSS")}
	start := time.Now()
	const perDir = 10_000
	var dirs []string
	for d := 0; d*perDir < n; d++ {
		name := fmt.Sprintf("d%04d", d)
		dino, err := eng.Meta.Create(ctx, meta.RootIno, name, meta.Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
		if err != nil {
			fail(err)
		}
		dirs = append(dirs, name)
		first := d * perDir
		err = benchkit.Striped(4, min(n-first, perDir), func(i int) error {
			tmpl := meta.Inode{Mode: syscall.S_IFREG | 0o644, Size: 4096}
			_, err := eng.Meta.Create(ctx, dino.Ino, fmt.Sprintf("object-with-a-typical-name-%08d.dat", first+i), tmpl, nil)
			return err
		})
		if err != nil {
			fail(err)
		}
	}
	runtime.GC()
	res["build_s"], res["rss_built"] = seconds(start), vmStat("VmRSS")
	start = time.Now()
	err = benchkit.Striped(listers, len(dirs), func(i int) error {
		_, err := os.ReadDir(filepath.Join(mnt, dirs[i]))
		return err
	})
	if err != nil {
		fail(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res["list_s"], res["rss_listed"], res["hwm"], res["heap"] = seconds(start), vmStat("VmRSS"), vmStat("VmHWM"), float64(ms.HeapInuse)/1e6
	json.NewEncoder(os.Stdout).Encode(res)
}

// vmStat returns a field of /proc/self/status in MB.
func vmStat(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024 / 1e6
		}
	}
	return 0
}
