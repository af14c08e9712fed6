package main

// The targets: bucketfs (one engine, with a FUSE mount and an NFS server),
// a local directory, a go-fuse loopback mount of another local directory,
// the raw store, and the peers (peers.go).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
	"bucketfs/internal/frontend/fuse"
	"bucketfs/internal/frontend/nfs4"
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
}

func (t *target) refreshCache() {
	if t.refresh != nil {
		t.refresh()
		time.Sleep(100 * time.Millisecond) // the signal is handled asynchronously
	}
}

func (t *target) bucketBacked() bool { return t.bucket != nil && t.fs != nil }
func (t *target) isBucketfs() bool   { return t.eng != nil }

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
	in, err := s.open(engine.Config{StateDir: filepath.Join(s.base, "state")}, "main", true, true)
	if err != nil {
		return err
	}
	s.eng = in.eng
	fuseDir := filepath.Join(in.mnt, "fuse")
	if err := os.Mkdir(fuseDir, 0o755); err != nil {
		return err
	}
	nfsRoot, err := s.dialNFS(in.addr, "")
	if err != nil {
		return err
	}
	if err := nfsRoot.Mkdir("nfs"); err != nil {
		return err
	}
	nfs, err := s.dialNFS(in.addr, "nfs")
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
				return dirFS(in.mnt), in.eng, in.close, nil
			}},
		&target{name: tNFS, fs: nfs, bucket: s.eng.Bucket, prefix: "nfs/", eng: s.eng,
			fresh: func(prefix, name string) (fsys, *engine.Engine, func(), error) {
				in, err := s.open(s.freshConfig(prefix, name), name, true, false)
				if err != nil {
					return nil, nil, nil, err
				}
				fs, err := s.dialNFS(in.addr, "")
				return fs, in.eng, in.close, err
			}})
	local := filepath.Join(s.base, "local")
	if err := os.Mkdir(local, 0o755); err != nil {
		return err
	}
	s.targets = append(s.targets, &target{name: tLocal, fs: dirFS(local), dir: local})
	if mnt, err := s.loopback(); err != nil {
		s.note("go-fuse loopback not measured: %v", err)
	} else {
		s.targets = append(s.targets, &target{name: tLoopback, fs: dirFS(mnt), dir: mnt})
	}
	s.targets = append(s.targets, &target{name: tRaw, bucket: s.eng.Bucket, prefix: "raw/"})
	if s.skipPeers {
		s.note("-skip-peers: s3fs and rclone not measured")
		return nil
	}
	s.peers()
	return nil
}

// freshConfig is a new engine over prefix of the main engine's store.
func (s *suite) freshConfig(prefix, name string) engine.Config {
	st := s.eng.Store
	return engine.Config{StateDir: filepath.Join(s.base, name), Bucket: st.Bucket, Prefix: prefix,
		Endpoint: st.Endpoint, Region: st.Region, AccessKey: st.AccessKey, SecretKey: st.SecretKey}
}

// instance is an engine with its NFS server (addr) and FUSE mount (mnt).
type instance struct {
	eng       *engine.Engine
	addr, mnt string
	close     func()
}

// open opens an engine on cfg and starts it, with an NFS server on a
// loopback port (nfs) and a FUSE mount on base/name-mnt (mount). in.close
// undoes it all; it is also a cleanup. The engine's goroutines carry the
// pprof label side=bucketfs.
func (s *suite) open(cfg engine.Config, name string, nfs, mount bool) (in *instance, err error) {
	cfg.ExportDelay, cfg.Logger = exportDelay, logger()
	var stops []func()
	in = &instance{close: sync.OnceFunc(func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	})}
	s.undo = append(s.undo, in.close)
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	pprof.Do(s.ctx, pprof.Labels("side", "bucketfs"), func(ctx context.Context) {
		if in.eng, err = engine.Open(ctx, cfg); err != nil {
			return
		}
		stops = append(stops, func() { logErr("close engine "+name, in.eng.Close()) })
		if nfs {
			var ln net.Listener
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return
			}
			srv, done := nfs4.New(in.eng.FS, in.eng.Meta.Fsid(), nfs4.Options{Logger: cfg.Logger}), make(chan struct{})
			go func() { defer close(done); srv.Serve(ctx, ln) }()
			stops = append(stops, func() { logErr("close NFS server "+name, srv.Close()); <-done })
			in.addr = ln.Addr().String()
		}
		if mount {
			in.mnt = filepath.Join(s.base, name+"-mnt")
			if err = os.Mkdir(in.mnt, 0o755); err != nil {
				return
			}
			var srv interface{ Unmount() error }
			if srv, err = fuse.Mount(in.eng.FS, in.mnt, fuse.Options{}); err != nil {
				return
			}
			stops = append(stops, func() { unmount(in.mnt, srv.Unmount) })
		}
		in.eng.Start()
	})
	return in, err
}

// loopback mounts a go-fuse loopback file system of base/loopback-src on
// base/loopback with the same 1 s attribute and entry timeouts as bucketfs.
func (s *suite) loopback() (string, error) {
	src, mnt := filepath.Join(s.base, "loopback-src"), filepath.Join(s.base, "loopback")
	if err := errors.Join(os.Mkdir(src, 0o755), os.Mkdir(mnt, 0o755)); err != nil {
		return "", err
	}
	root, err := gofs.NewLoopbackRoot(src)
	if err != nil {
		return "", err
	}
	sec := time.Second
	var srv interface{ Unmount() error }
	pprof.Do(s.ctx, pprof.Labels("side", "loopback"), func(context.Context) {
		srv, err = gofs.Mount(mnt, root, &gofs.Options{EntryTimeout: &sec, AttrTimeout: &sec})
	})
	if err != nil {
		return "", err
	}
	s.undo = append(s.undo, func() { unmount(mnt, srv.Unmount) })
	s.note("go-fuse loopback: fs.NewLoopbackRoot with go-fuse's default mount options and 1 s entry and attribute timeouts")
	return mnt, nil
}

// unmount unmounts mnt, lazily if it is busy.
func unmount(mnt string, unmount func() error) {
	if err := unmount(); err != nil {
		logErr("unmount "+mnt+"; detaching it", err)
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
}

// measure runs fn as the measuring client (pprof label side=client) and
// returns its error; a target that fails is noted and left out.
func (s *suite) measure(fn func() error) (err error) {
	pprof.Do(s.ctx, pprof.Labels("side", "client"), func(context.Context) { err = fn() })
	return err
}

// profile writes CPU and allocation profiles of the whole process while fn
// runs: name.cpu.pprof, and name.allocs.pprof with name.allocs-base.pprof
// taken just before (go tool pprof -diff_base).
func (s *suite) profile(name string, fn func() error) error {
	stem := filepath.Join(s.out, fmt.Sprintf("suite-%s-%s", s.date, name))
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

// profileFUSE runs fn, under profile name+"-fuse" if t is bucketfs FUSE.
func (s *suite) profileFUSE(t *target, name string, fn func() error) error {
	if t.name != tFUSE {
		return fn()
	}
	return s.profile(name+"-fuse", fn)
}
