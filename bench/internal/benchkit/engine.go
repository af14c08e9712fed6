package benchkit

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"

	"bucketfs/internal/engine"
	"bucketfs/internal/frontend/fuse"
	"bucketfs/internal/frontend/nfs4"
)

// Instance is an engine with its NFS server (Addr) and FUSE mount (Mnt).
type Instance struct {
	Eng       *engine.Engine
	Addr, Mnt string
	Close     func() // undoes it all, once; it is also a cleanup of the Run
}

// Serve is what Open starts beside the engine, and the pprof label "side"
// of the goroutines of each part ("" for none).
type Serve struct {
	NFS                           bool   // an NFSv4.1 server on a loopback port
	Mnt                           string // a FUSE mount on this new directory, if set
	EngineSide, NFSSide, FUSESide string
}

// Logger is the engines' logger: warnings and errors to stderr.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// OverStore is the configuration of a new engine over prefix of eng's
// embedded store, as an external bucket.
func OverStore(eng *engine.Engine, prefix string) engine.Config {
	st := eng.Store
	return engine.Config{Bucket: st.Bucket, Prefix: prefix, Endpoint: st.Endpoint, Region: st.Region,
		AccessKey: st.AccessKey, SecretKey: st.SecretKey}
}

// Open opens an engine on cfg (with Logger, unless cfg has one), starts
// what s asks for beside it and then the engine. name is the instance's in
// messages.
func (r *Run) Open(cfg engine.Config, name string, s Serve) (in *Instance, err error) {
	cfg.Logger = cmp.Or(cfg.Logger, Logger())
	var stops []func()
	in = &Instance{Close: sync.OnceFunc(func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	})}
	r.Defer(in.Close)
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	do := func(side string, f func(ctx context.Context)) {
		if side == "" {
			f(r.Ctx)
			return
		}
		pprof.Do(r.Ctx, pprof.Labels("side", side), f)
	}
	if do(s.EngineSide, func(ctx context.Context) { in.Eng, err = engine.Open(ctx, cfg) }); err != nil {
		return nil, err
	}
	stops = append(stops, func() { r.LogErr("close engine "+name, in.Eng.Close()) })
	if s.NFS {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv, err := nfs4.New(context.Background(), in.Eng.FS, nfs4.Options{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		done := make(chan struct{})
		do(s.NFSSide, func(ctx context.Context) { go func() { defer close(done); srv.Serve(ctx, ln) }() })
		stops = append(stops, func() { r.LogErr("close NFS server "+name, srv.Close()); <-done })
		in.Addr = ln.Addr().String()
	}
	if s.Mnt != "" {
		if err := os.MkdirAll(s.Mnt, 0o755); err != nil {
			return nil, err
		}
		var srv interface{ Unmount() error }
		if do(s.FUSESide, func(context.Context) { srv, err = fuse.Mount(in.Eng.FS, s.Mnt, fuse.Options{}) }); err != nil {
			return nil, err
		}
		in.Mnt = s.Mnt
		stops = append(stops, func() { r.Unmount(s.Mnt, srv.Unmount) })
	}
	do(s.EngineSide, func(context.Context) { in.Eng.Start() })
	return in, nil
}

// Unmount unmounts mnt with unmount, and lazily if that fails (it is busy).
func (r *Run) Unmount(mnt string, unmount func() error) {
	if err := unmount(); err != nil {
		r.LogErr("unmount "+mnt+"; detaching it", err)
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
}
