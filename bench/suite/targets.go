package main

// The targets: bucketfs (one engine, with a FUSE mount and an NFS server),
// a local directory, a go-fuse loopback mount of another local directory,
// the raw store, and the peers (peers.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
)

// Target names, in table order.
const (
	tFUSE     = "bucketfs FUSE"
	tNFS      = "bucketfs NFS"
	tLocal    = "local dir"
	tLoopback = "go-fuse loopback"
	tRaw      = "raw S3"
	tS3fs     = "s3fs"
	tRclone   = "rclone"
)

var targetOrder = []string{tFUSE, tNFS, tLocal, tLoopback, tRaw, tS3fs, tRclone}

// target is one column of the table.
type target struct {
	name string
	fs   fsys   // the work area; nil for the raw store
	dir  string // the work area's path, if it is a directory (fio runs there)
	// bucket and prefix: an object PUT at bucket key prefix+name is the file
	// name in the work area (nil for local and loopback).
	bucket *bucket.Client
	prefix string
	// bucketfs: the engine serving it (for its bucket counters), and how
	// to open a fresh one with the same front end over a prefix of the
	// main bucket (for first-access listings).
	eng   *engine.Engine
	fresh func(prefix, name string) (fsys, *engine.Engine, func(), error)
	// refresh, if set, makes the target forget its cached listings
	// (rclone's SIGHUP), so that objects PUT through S3 show.
	refresh func()
	// pending, if set, counts the work the target still does in the
	// background after a measurement (rclone's uploads of closed files),
	// which settle waits for.
	pending func() (int, error)
	settled time.Duration // spent in settle
}

func (t *target) refreshCache() {
	if t.refresh != nil {
		t.refresh()
		time.Sleep(100 * time.Millisecond) // the signal is handled asynchronously
	}
}

func (t *target) bucketBacked() bool { return t.bucket != nil && t.fs != nil }
func (t *target) isBucketfs() bool   { return t.eng != nil }
func (t *target) isPeer() bool       { return t.name == tS3fs || t.name == tRclone }

func (s *suite) target(name string) *target {
	for _, t := range s.targets {
		if t.name == name {
			return t
		}
	}
	return nil
}

// setup opens the main engine and every target.
func (s *suite) setup() error {
	in, err := s.open(engine.Config{StateDir: filepath.Join(s.Base, "state")}, "main", true, true)
	if err != nil {
		return err
	}
	s.eng = in.Eng
	fuseDir := filepath.Join(in.Mnt, "fuse")
	if err := os.Mkdir(fuseDir, 0o755); err != nil {
		return err
	}
	nfsRoot, err := s.dialNFS(in.Addr, "")
	if err != nil {
		return err
	}
	if err := nfsRoot.Mkdir("nfs"); err != nil {
		return err
	}
	nfs, err := s.dialNFS(in.Addr, "nfs")
	if err != nil {
		return err
	}
	s.targets = append(s.targets,
		&target{name: tFUSE, fs: dirFS(fuseDir), dir: fuseDir, bucket: s.eng.Bucket, prefix: "fuse/", eng: s.eng,
			fresh: func(prefix, name string) (fsys, *engine.Engine, func(), error) {
				in, err := s.open(s.freshConfig(prefix, name), name, false, true)
				if err != nil {
					return nil, nil, nil, err
				}
				return dirFS(in.Mnt), in.Eng, in.Close, nil
			}},
		&target{name: tNFS, fs: nfs, bucket: s.eng.Bucket, prefix: "nfs/", eng: s.eng,
			fresh: func(prefix, name string) (fsys, *engine.Engine, func(), error) {
				in, err := s.open(s.freshConfig(prefix, name), name, true, false)
				if err != nil {
					return nil, nil, nil, err
				}
				fs, err := s.dialNFS(in.Addr, "")
				return fs, in.Eng, in.Close, err
			}})
	local := filepath.Join(s.Base, "local")
	if err := os.Mkdir(local, 0o755); err != nil {
		return err
	}
	s.targets = append(s.targets, &target{name: tLocal, fs: dirFS(local), dir: local})
	if mnt, err := s.loopback(); err != nil {
		s.Note("go-fuse loopback not measured: %v", err)
	} else {
		s.targets = append(s.targets, &target{name: tLoopback, fs: dirFS(mnt), dir: mnt})
	}
	s.targets = append(s.targets, &target{name: tRaw, bucket: s.eng.Bucket, prefix: "raw/"})
	if s.skipPeers {
		s.Note("-skip-peers: s3fs and rclone not measured")
		return nil
	}
	s.peers()
	return nil
}

// freshConfig is a new engine over prefix of the main engine's store.
func (s *suite) freshConfig(prefix, name string) engine.Config {
	cfg := benchkit.OverStore(s.eng, prefix)
	cfg.StateDir = filepath.Join(s.Base, name)
	return cfg
}

// open opens an engine on cfg and starts it, with an NFS server on a
// loopback port (nfs) and a FUSE mount on Base/name-mnt (mount). in.Close
// undoes it all; it is also a cleanup. The engine's goroutines carry the
// pprof label side=bucketfs.
func (s *suite) open(cfg engine.Config, name string, nfs, mount bool) (*benchkit.Instance, error) {
	cfg.ExportDelay = exportDelay
	serve := benchkit.Serve{NFS: nfs, EngineSide: "bucketfs", NFSSide: "bucketfs", FUSESide: "bucketfs"}
	if mount {
		serve.Mnt = filepath.Join(s.Base, name+"-mnt")
	}
	return s.Open(cfg, name, serve)
}

// loopback mounts a go-fuse loopback file system of base/loopback-src on
// base/loopback with the same 1 s attribute and entry timeouts as bucketfs.
func (s *suite) loopback() (string, error) {
	src, mnt := filepath.Join(s.Base, "loopback-src"), filepath.Join(s.Base, "loopback")
	if err := errors.Join(os.Mkdir(src, 0o755), os.Mkdir(mnt, 0o755)); err != nil {
		return "", err
	}
	root, err := gofs.NewLoopbackRoot(src)
	if err != nil {
		return "", err
	}
	sec := time.Second
	var srv interface{ Unmount() error }
	pprof.Do(s.Ctx, pprof.Labels("side", "loopback"), func(context.Context) {
		srv, err = gofs.Mount(mnt, root, &gofs.Options{EntryTimeout: &sec, AttrTimeout: &sec})
	})
	if err != nil {
		return "", err
	}
	s.Defer(func() { s.Unmount(mnt, srv.Unmount) })
	s.Note("go-fuse loopback: fs.NewLoopbackRoot with go-fuse's default mount options and 1 s entry and attribute timeouts; " +
		"on a kernel with FUSE passthrough (6.9 and later) it opens each file with a backing file (BACKING_OPEN), so the kernel " +
		"reads and writes the local file itself and no READ or WRITE reaches its server: a create of a written file costs it " +
		"5 requests (LOOKUP, CREATE, GETXATTR, FLUSH, RELEASE) and bucketfs 6: the same and a WRITE, whose data bucketfs stores itself")
	return mnt, nil
}

// measure runs fn on t as the measuring client (pprof label side=client)
// after a sync, for a peer with a context bounded by timeout (if not 0),
// and tells whether that ran out.
func (s *suite) measure(t *target, timeout time.Duration, fn func(ctx context.Context) error) (timedOut bool, err error) {
	syscall.Sync()
	ctx, cancel := s.Ctx, context.CancelFunc(func() {})
	if timeout > 0 && t.isPeer() {
		ctx, cancel = context.WithTimeout(s.Ctx, timeout)
	}
	defer cancel()
	pprof.Do(s.Ctx, pprof.Labels("side", "client"), func(context.Context) { err = fn(ctx) })
	return ctx.Err() != nil && s.Ctx.Err() == nil, err
}

// settleTimeout bounds one wait for a target's background work.
const settleTimeout = 120 * time.Second

// settle waits, after a measurement of t (of run, from 0) and outside it,
// until t has no background work left, so that none of it runs during the
// next measurement: rclone uploads a file some seconds after its close.
// The count must be 0 twice in a row, 250 ms apart, since the kernel sends
// the release of a FUSE file after close returns. After settleTimeout it
// notes what is left and goes on.
func (s *suite) settle(t *target, run int) {
	if t.pending == nil {
		return
	}
	start := time.Now()
	defer func() {
		t.settled += time.Since(start)
		fmt.Fprintf(os.Stderr, "   (%s: %.1f s until idle)\n", t.name, time.Since(start).Seconds())
	}()
	for idle := 0; ; {
		n, err := t.pending()
		switch {
		case err != nil:
			s.Note("%s: could not tell whether it was idle after workload %d run %d; went on: %v", t.name, s.current.n, run+1, err)
			return
		case n == 0:
			idle++
		default:
			idle = 0
		}
		if idle == 2 {
			return
		}
		if time.Since(start) > settleTimeout {
			s.Note("%s: still busy (%d pending) %v after workload %d run %d; went on", t.name, n, settleTimeout, s.current.n, run+1)
			return
		}
		select {
		case <-s.Ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// profile writes CPU and allocation profiles of the whole process while fn
// runs: name.cpu.pprof, and name.allocs.pprof with name.allocs-base.pprof
// taken just before (go tool pprof -diff_base).
func (s *suite) profile(stem string, fn func() error) error {
	if err := writeProfile("allocs", stem+".allocs-base.pprof"); err != nil {
		return err
	}
	w, err := os.Create(stem + ".cpu.pprof")
	if err != nil {
		return err
	}
	defer w.Close()
	if err := pprof.StartCPUProfile(w); err != nil {
		return err
	}
	err = fn()
	pprof.StopCPUProfile()
	s.profiles = append(s.profiles, stem)
	return errors.Join(err, writeProfile("allocs", stem+".allocs.pprof"))
}

func writeProfile(kind, name string) error {
	w, err := os.Create(name)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(kind).WriteTo(w, 0), w.Close())
}

// profileFUSE runs fn, under profile name+"-fuse" if t is bucketfs FUSE and
// an earlier run has not taken that profile already.
func (s *suite) profileFUSE(t *target, name string, fn func() error) error {
	stem := filepath.Join(s.Out, fmt.Sprintf("suite-%s-%s-fuse", s.Date, name))
	if t.name != tFUSE || slices.Contains(s.profiles, stem) {
		return fn()
	}
	return s.profile(stem, fn)
}
