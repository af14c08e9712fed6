package main

// The targets' sides: engines with their NFS servers and FUSE mounts,
// ganesha, and the files of each behind one interface.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/engine"
	"bucketfs/internal/nfsclient"
)

// open opens an engine on cfg with its state in Base/name and starts it,
// with an NFS server on a loopback port (nfs) and a FUSE mount on
// Base/name-mnt (mount). The engine's goroutines are labelled label, the NFS
// server's bucketfs-nfs and FUSE's fuse. in.Close undoes it all; it is also
// a cleanup.
func (b *bench) open(cfg engine.Config, name, label string, nfs, mount bool) (*benchkit.Instance, error) {
	cfg.StateDir, cfg.ExportDelay = filepath.Join(b.Base, name), exportDelay
	serve := benchkit.Serve{NFS: nfs, EngineSide: label, NFSSide: "bucketfs-nfs", FUSESide: "fuse"}
	if mount {
		serve.Mnt = filepath.Join(b.Base, name+"-mnt")
	}
	return b.Open(cfg, name, serve)
}

// fresh is a measurement of read on a new engine over the object the raw
// write put, with an NFS server (nfs) or a FUSE mount, after dropping caches.
func (b *bench) fresh(name string, nfs bool, read func(fsys) (float64, error)) measurement {
	return func() (float64, error) {
		in, err := b.open(benchkit.OverStore(b.main.Eng, "cold/"), name, map[bool]string{true: "bucketfs-nfs", false: "fuse"}[nfs], nfs, !nfs)
		if err != nil {
			return 0, err
		}
		defer in.Close()
		var fs fsys = localFS(in.Mnt)
		if nfs {
			if fs, err = b.dial(b.Ctx, in.Addr); err != nil {
				return 0, err
			}
		}
		b.DropCaches()
		before := in.Eng.Bucket.Stats()
		v, err := read(fs)
		s := in.Eng.Bucket.Stats()
		b.Notes = append(b.Notes, fmt.Sprintf("%s read: %d GETs, %s from the bucket for a %s file",
			name, s.Get-before.Get, benchkit.MiB(int64(s.BytesRead-before.BytesRead)), benchkit.MiB(b.size)))
		return v, err
	}
}

const ganeshaConf = `NFS_CORE_PARAM { NFS_Port = %d; Bind_addr = 127.0.0.1; Protocols = 4; Enable_UDP = false;
  Enable_NLM = false; Enable_RQUOTA = false; }
NFS_KRB5 { Active_krb5 = false; }
NFSv4 { Graceless = true; RecoveryRoot = %q; }
EXPORT { Export_Id = 1; Path = %q; Pseudo = "/"; Protocols = 4; Transports = TCP;
  Access_Type = RW; Squash = None; SecType = sys; FSAL { Name = VFS; } }
`

// startGanesha runs ganesha in the foreground on a free loopback port with
// a VFS export of base/ganesha/export, and connects b.gan to it.
func (b *bench) startGanesha() error {
	dir := filepath.Join(b.Base, "ganesha")
	conf, log := filepath.Join(dir, "ganesha.conf"), filepath.Join(dir, "ganesha.log")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	err = errors.Join(os.MkdirAll(filepath.Join(dir, "export"), 0o755), os.MkdirAll(filepath.Join(dir, "recovery"), 0o755),
		os.WriteFile(conf, fmt.Appendf(nil, ganeshaConf, port, filepath.Join(dir, "recovery"), filepath.Join(dir, "export")), 0o644))
	if err != nil {
		return err
	}
	cmd := exec.Command(b.bin, "-F", "-f", conf, "-L", log, "-p", filepath.Join(dir, "ganesha.pid"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's SIGINT is ours to pass on
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.Defer(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(b.Ctx, 2*time.Second)
		b.gan, err = b.dial(ctx, fmt.Sprintf("127.0.0.1:%d", port))
		if cancel(); err == nil {
			v, _ := exec.Command(b.bin, "-v").CombinedOutput()
			b.Notes = append(b.Notes, fmt.Sprintf("ganesha: %s, VFS export of a directory beside the bucketfs state", bytes.TrimSpace(v)))
			return nil
		}
		select {
		case <-exited:
			err = fmt.Errorf("%s exited at start: %v", b.bin, cmd.ProcessState)
		case <-b.Ctx.Done():
			return b.Ctx.Err()
		case <-time.After(200 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
		}
		out, _ := os.ReadFile(log)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("no NFSv4.1 session on port %d: %w; %s ends:\n%s", port, err, log, strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
}

// fsys is where a target's files are: an NFS server through the Go client,
// or a directory. Names are "name" or "dir/name".
type fsys interface {
	Mkdir(dir string) error
	Open(name string, create bool) (file, error)
}

// file is an open file; Sync is COMMIT or fsync.
type file interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

type localFS string

func (d localFS) Mkdir(dir string) error { return os.Mkdir(filepath.Join(string(d), dir), 0o755) }

func (d localFS) Open(name string, create bool) (file, error) {
	flag := map[bool]int{true: os.O_RDWR | os.O_CREATE | os.O_EXCL}[create]
	return os.OpenFile(filepath.Join(string(d), name), flag, 0o644)
}

// nfsFS opens files with one client; it knows the handles of the root ("")
// and of the directories it made.
type nfsFS struct {
	ctx  context.Context
	c    *nfsclient.Client
	dirs map[string][]byte
}

// dial sets up an NFSv4.1 client as root; it is shut down as a cleanup.
func (b *bench) dial(ctx context.Context, addr string) (*nfsFS, error) {
	c, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1,
		Auth: nfsclient.AuthSys{UID: 0, GID: 0}, RenewInterval: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	b.Defer(func() { c.Shutdown(context.Background()) })
	root, err := c.RootFH(ctx)
	return &nfsFS{ctx: b.Ctx, c: c, dirs: map[string][]byte{"": root}}, err
}

func (n *nfsFS) Mkdir(dir string) (err error) {
	n.dirs[dir], err = n.c.Mkdir(n.ctx, n.dirs[""], dir, nfsclient.Attrs{}.WithMode(0o755))
	return err
}

func (n *nfsFS) Open(name string, create bool) (file, error) {
	dir, base := path.Split(name)
	fh, opts := n.dirs[strings.TrimSuffix(dir, "/")], nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ}
	open := n.c.Open
	if create {
		open, opts = n.c.Create, nfsclient.OpenOptions{Mode: nfsclient.Guarded, Attrs: nfsclient.Attrs{}.WithMode(0o644)}
	}
	f, err := open(n.ctx, fh, base, opts)
	if err != nil {
		return nil, err
	}
	return &nfsFile{nfsFS: n, f: f, verfs: map[[8]byte]bool{}}, nil
}

// nfsFile is one OPEN; it remembers the write verifiers of its WRITEs.
type nfsFile struct {
	*nfsFS
	f     *nfsclient.OpenFile
	mu    sync.Mutex
	verfs map[[8]byte]bool // guarded by mu
}

func (f *nfsFile) ReadAt(p []byte, off int64) (int, error) {
	data, _, err := f.c.Read(f.ctx, f.f, uint64(off), uint32(len(p)))
	if n := copy(p, data); err != nil || n < len(p) {
		return n, cmp.Or(err, fmt.Errorf("READ at %d: %d of %d bytes", off, n, len(p)))
	}
	return len(p), nil
}

func (f *nfsFile) WriteAt(p []byte, off int64) (int, error) {
	w, err := f.c.Write(f.ctx, f.f, uint64(off), p, nfsv4.UNSTABLE4)
	if err == nil && int(w.Count) != len(p) {
		err = fmt.Errorf("WRITE at %d: %d of %d bytes written", off, w.Count, len(p))
	}
	f.mu.Lock()
	f.verfs[w.Verifier] = true
	f.mu.Unlock()
	return int(w.Count), err
}

// Sync commits the whole file and checks that the server did not restart.
func (f *nfsFile) Sync() error {
	verf, err := f.c.Commit(f.ctx, f.f.FH, 0, 0)
	if err == nil && (len(f.verfs) != 1 || !f.verfs[verf]) {
		err = errors.New("the write verifier changed before COMMIT: the server restarted")
	}
	return err
}

func (f *nfsFile) Close() error { return f.c.CloseFile(f.ctx, f.f) }
