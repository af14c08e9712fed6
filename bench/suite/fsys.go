package main

// The file view of a target: a directory (local, loopback, FUSE mounts of
// bucketfs and the peers) or bucketfs's NFS server through the Go client.
// Names are slash-separated and relative to the target's work area.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/nfsclient"
)

type fsys interface {
	Mkdir(name string) error
	Create(name string) (file, error) // a new file, opened for writing
	Open(name string) (file, error)   // an existing file, opened for reading
	// List is `ls -l`: the names of dir and the attributes of each entry.
	// It returns the number of entries.
	List(ctx context.Context, dir string) (int, error)
	Rename(oldName, newName string) error
	Stat(name string) error // lstat, or LOOKUP and GETATTR
	// Inflight is how many reads or writes of one file to keep in flight.
	Inflight() int
}

// file is an open file; Sync is fsync or COMMIT.
type file interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// dirFS is a directory of the local file system or of a mount.
type dirFS string

func (d dirFS) path(name string) string { return filepath.Join(string(d), filepath.FromSlash(name)) }

func (d dirFS) Mkdir(name string) error { return os.Mkdir(d.path(name), 0o755) }

func (d dirFS) Create(name string) (file, error) {
	return os.OpenFile(d.path(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

func (d dirFS) Open(name string) (file, error) { return os.Open(d.path(name)) }

func (d dirFS) List(ctx context.Context, dir string) (int, error) {
	p := d.path(dir)
	ents, err := os.ReadDir(p)
	if err != nil {
		return 0, err
	}
	for i, e := range ents {
		if i%256 == 0 && ctx.Err() != nil {
			return i, ctx.Err()
		}
		if _, err := os.Lstat(filepath.Join(p, e.Name())); err != nil {
			return i, err
		}
	}
	return len(ents), nil
}

func (d dirFS) Rename(oldName, newName string) error {
	return os.Rename(d.path(oldName), d.path(newName))
}

func (d dirFS) Stat(name string) error { _, err := os.Lstat(d.path(name)); return err }

func (d dirFS) Inflight() int { return 1 }

// nfsFS is a directory on an NFS server, used through one Go client. It
// remembers the handles of the directories it looked up or made.
type nfsFS struct {
	ctx  context.Context
	c    *nfsclient.Client
	root string // the work area's path from the server's root
	mu   sync.Mutex
	dirs map[string][]byte // guarded by mu
}

// dialNFS sets up an NFSv4.1 client as root for the work area root; it is
// shut down as a cleanup.
func (s *suite) dialNFS(addr, root string) (*nfsFS, error) {
	c, err := nfsclient.Dial(s.Ctx, addr, nfsclient.Config{MinorVersion: 1,
		Auth: nfsclient.AuthSys{UID: 0, GID: 0}, RenewInterval: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	s.Defer(func() { c.Shutdown(context.Background()) })
	return &nfsFS{ctx: s.Ctx, c: c, root: root, dirs: map[string][]byte{}}, nil
}

// dir returns the handle of the directory name ("" is the work area).
func (n *nfsFS) dir(name string) ([]byte, error) {
	n.mu.Lock()
	fh, ok := n.dirs[name]
	n.mu.Unlock()
	if ok {
		return fh, nil
	}
	fh, err := n.c.LookupPath(n.ctx, path.Join(n.root, name))
	if err == nil {
		n.mu.Lock()
		n.dirs[name] = fh
		n.mu.Unlock()
	}
	return fh, err
}

func (n *nfsFS) Mkdir(name string) error {
	parent, base := path.Split(name)
	dfh, err := n.dir(strings.TrimSuffix(parent, "/"))
	if err != nil {
		return err
	}
	fh, err := n.c.Mkdir(n.ctx, dfh, base, nfsclient.Attrs{}.WithMode(0o755))
	if err == nil {
		n.mu.Lock()
		n.dirs[name] = fh
		n.mu.Unlock()
	}
	return err
}

func (n *nfsFS) open(name string, create bool) (file, error) {
	parent, base := path.Split(name)
	dfh, err := n.dir(strings.TrimSuffix(parent, "/"))
	if err != nil {
		return nil, err
	}
	var f *nfsclient.OpenFile
	if create {
		f, err = n.c.Create(n.ctx, dfh, base, nfsclient.OpenOptions{Mode: nfsclient.Guarded, Attrs: nfsclient.Attrs{}.WithMode(0o644)})
	} else {
		f, err = n.c.Open(n.ctx, dfh, base, nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	}
	if err != nil {
		return nil, err
	}
	return &nfsFile{nfsFS: n, f: f}, nil
}

func (n *nfsFS) Create(name string) (file, error) { return n.open(name, true) }
func (n *nfsFS) Open(name string) (file, error)   { return n.open(name, false) }

// lsMask is what `ls -l` shows, asked for in READDIR as the Linux client's
// READDIRPLUS does.
var lsMask = nfsclient.Bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER,
	nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_TIME_MODIFY)

func (n *nfsFS) List(ctx context.Context, dir string) (int, error) {
	fh, err := n.dir(dir)
	if err != nil {
		return 0, err
	}
	ents, err := n.c.ReadDir(ctx, fh, lsMask)
	return len(ents), err
}

func (n *nfsFS) Rename(oldName, newName string) error {
	op, ob := path.Split(oldName)
	np, nb := path.Split(newName)
	ofh, err := n.dir(strings.TrimSuffix(op, "/"))
	if err != nil {
		return err
	}
	nfh, err := n.dir(strings.TrimSuffix(np, "/"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	for d := range n.dirs { // handles stay valid, but the names change
		if d == oldName || strings.HasPrefix(d, oldName+"/") {
			delete(n.dirs, d)
		}
	}
	n.mu.Unlock()
	return n.c.Rename(n.ctx, ofh, ob, nfh, nb)
}

func (n *nfsFS) Stat(name string) error {
	_, _, err := n.c.StatPath(n.ctx, path.Join(n.root, name), lsMask)
	return err
}

func (n *nfsFS) Inflight() int { return nfsInflight }

// nfsFile is one OPEN.
type nfsFile struct {
	*nfsFS
	f *nfsclient.OpenFile
}

func (f *nfsFile) ReadAt(p []byte, off int64) (int, error) {
	data, eof, err := f.c.Read(f.ctx, f.f, uint64(off), uint32(len(p)))
	n := copy(p, data)
	if err == nil && n < len(p) {
		if !eof {
			return n, fmt.Errorf("READ at %d: %d of %d bytes", off, n, len(p))
		}
		err = io.EOF
	}
	return n, err
}

func (f *nfsFile) WriteAt(p []byte, off int64) (int, error) {
	w, err := f.c.Write(f.ctx, f.f, uint64(off), p, nfsv4.UNSTABLE4)
	if err == nil && int(w.Count) != len(p) {
		err = fmt.Errorf("WRITE at %d: %d of %d bytes written", off, w.Count, len(p))
	}
	return int(w.Count), err
}

func (f *nfsFile) Sync() error {
	_, err := f.c.Commit(f.ctx, f.f.FH, 0, 0)
	return err
}

func (f *nfsFile) Close() error { return f.c.CloseFile(f.ctx, f.f) }

// writeFile writes size bytes of the pattern to the new file name in
// 1 MiB writes (fs.Inflight() at a time), then syncs if sync and closes it.
func (s *suite) writeFile(fs fsys, name string, size int64, sync bool) error {
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	err = benchkit.Parallel(s.Ctx, size, ioSize, fs.Inflight(), func(off int64, buf []byte) error {
		s.pattern.ReadAt(buf, off)
		_, err := f.WriteAt(buf, off)
		return err
	})
	if err == nil && sync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// readFile reads the file name of size bytes in 1 MiB reads
// (fs.Inflight() at a time) and checks it against the pattern.
func (s *suite) readFile(fs fsys, name string, size int64) error {
	f, err := fs.Open(name)
	if err != nil {
		return err
	}
	err = s.check(f, size, min(size, ioSize), fs.Inflight())
	return errors.Join(err, f.Close())
}

// check reads size bytes of f in chunks, workers at a time, and compares
// them with the pattern.
func (s *suite) check(f io.ReaderAt, size, chunk int64, workers int) error {
	return benchkit.Parallel(s.Ctx, size, chunk, workers, func(off int64, buf []byte) error {
		n, err := f.ReadAt(buf, off)
		if err == io.EOF && n == len(buf) {
			err = nil
		}
		if err == nil && !s.pattern.Matches(buf, off) {
			err = fmt.Errorf("wrong data in [%d,+%d)", off, len(buf))
		}
		return cmp.Or(err, s.Ctx.Err())
	})
}
