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
	"strconv"
	"strings"
	"sync"
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
	s.Note("7: fio --ioengine=psync --direct=0 --invalidate=0 --bs=4k --size=%s --runtime=%v --time_based, one file shared by the jobs, laid out by fio before the first (random read) run; reads are warm where the page cache keeps the file", human(s.sz.fioSize), s.sz.fioRuntime)
	type job struct {
		rw   string
		jobs int
	}
	var rows []*result
	jobs := []job{{"randread", 1}, {"randread", 16}, {"randwrite", 1}, {"randwrite", 16}}
	for _, j := range jobs {
		rows = append(rows, s.row(7, fmt.Sprintf("fio 4 KiB %s, %d job(s)", j.rw, j.jobs), "IOPS", true))
	}
	return s.each(rows[0], false, false, func(ctx context.Context, t *target) error {
		if t.dir == "" {
			return errSkipped
		}
		if err := os.Mkdir(filepath.Join(t.dir, "w7"), 0o755); err != nil {
			return err
		}
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
// and the stat of one entry on first access of another such directory. The objects are written straight into
// the embedded store's data directory (versitygw serves a file there as an
// object) and read through fresh bucketfs engines; local and loopback get
// empty files in their source directories and a dropped page cache.
func (s *suite) bigDir() error {
	n := s.sz.bigDir
	rs := s.row(8, fmt.Sprintf("stat 1 of %d, first access", n), "ms", false)
	rf := s.row(8, fmt.Sprintf("ls -l of %d, first access", n), "s", false)
	rw := s.row(8, fmt.Sprintf("ls -l of %d, warm", n), "s", false)
	data := filepath.Join(s.eng.Store.Dir, "data")
	s.Note("8: %d empty objects written as files into the store's data directory (%s), as versitygw serves them; bucketfs reads them through a fresh engine (its own state) over a prefix of the bucket", n, data)
	return s.each(rf, false, true, func(ctx context.Context, t *target) error {
		fs, dir := t.fs, "w8"
		switch {
		case t.isBucketfs():
			prefix := "w8-" + strings.Fields(t.name)[1] + "/"
			if err := makeDirs(filepath.Join(data, s.eng.Store.Bucket, prefix, "w8"), n); err != nil {
				return err
			}
			var closeFresh func()
			var err error
			if fs, _, closeFresh, err = t.fresh(prefix, "w8-"+strings.Fields(t.name)[1]); err != nil {
				return err
			}
			defer closeFresh()
		case t.bucket != nil:
			if err := makeDirs(filepath.Join(data, peerBucket, t.prefix, "w8"), n); err != nil {
				return err
			}
			t.refreshCache()
		case t.name == tLoopback:
			if err := makeDirs(filepath.Join(s.Base, "loopback-src", "w8"), n); err != nil {
				return err
			}
		default:
			if err := makeDirs(filepath.Join(t.dir, "w8"), n); err != nil {
				return err
			}
		}
		s.DropCaches()
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
		start := time.Now()
		if err := fs.Stat(fmt.Sprintf("%s/f%07d", dir+"s", n/2)); err != nil {
			rs.miss(t.name, err.Error())
		} else {
			rs.set(t.name, seconds(start)*1e3)
		}
		return nil
	})
}

// makeDirs makes dir for ls -l and dir+"s" for the stat, each with n empty
// files.
func makeDirs(dir string, n int) error {
	return errors.Join(makeFiles(dir, n), makeFiles(dir+"s", n))
}

// makeFiles makes the directory dir (and its parents) with n empty files.
func makeFiles(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += 4 {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%07d", i)))
				if err == nil {
					err = f.Close()
				}
				errs[w] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

const rssChildArg = "-rss-child"

// 9: the RSS of a child process (this program) running an engine with a
// FUSE mount whose namespace holds -entries files of 4 KiB (made with
// meta.Create, 10,000 a directory), after listing every directory through
// the mount.
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
	s.Note("9: child process with the embedded store, an engine and a FUSE mount: VmRSS %.0f MB before the namespace, %.0f MB after creating %d entries (%.1f s), %.0f MB after listing every directory through the mount (%.1f s); VmHWM %.0f MB; Go heap in use %.0f MB",
		res["rss_empty"], res["rss_built"], s.sz.entries, res["build_s"], res["rss_listed"], res["list_s"], res["hwm"], res["heap"])
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
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := d*perDir + w; i < min(n, (d+1)*perDir); i += 4 {
					tmpl := meta.Inode{Mode: syscall.S_IFREG | 0o644, Size: 4096}
					if _, err := eng.Meta.Create(ctx, dino.Ino, fmt.Sprintf("object-with-a-typical-name-%08d.dat", i), tmpl, nil); err != nil {
						fail(err)
					}
				}
			})
		}
		wg.Wait()
	}
	runtime.GC()
	res["build_s"], res["rss_built"] = seconds(start), vmStat("VmRSS")
	start = time.Now()
	for _, d := range dirs {
		if _, err := os.ReadDir(filepath.Join(mnt, d)); err != nil {
			fail(err)
		}
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
