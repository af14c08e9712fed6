package main

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
)

// clientFS is the file system as one client of one server sees it: the
// NFS client of a serve process, or the FUSE mount of a mount process.
// Paths are relative to the root, slash-separated; an error unwraps to
// an errno (syscall.Errno) where the server answered with one, so that
// answers through NFS and FUSE compare alike, and names the call that
// failed.
type clientFS interface {
	name() string
	// writeFile creates path (mode 0644) or truncates it, writes data and
	// closes it; with sync it makes the data durable first (fsync, or NFS
	// COMMIT).
	writeFile(ctx context.Context, p string, data []byte, sync bool) error
	readFile(ctx context.Context, p string) ([]byte, error)
	mkdir(ctx context.Context, p string, mode uint32) error
	rename(ctx context.Context, from, to string) error
	// unlink removes a file; on NFS it is REMOVE, which removes an empty
	// directory too.
	unlink(ctx context.Context, p string) error
	// rmdir removes an empty directory; on NFS it is REMOVE too.
	rmdir(ctx context.Context, p string) error
	link(ctx context.Context, from, to string) error
	truncate(ctx context.Context, p string, size int64) error
	chmod(ctx context.Context, p string, mode uint32) error
	stat(ctx context.Context, p string) (fileInfo, error)
	readDir(ctx context.Context, p string) ([]string, error)
	// create makes a new file p (it must not exist) and keeps it open
	// for a stream of writes.
	create(ctx context.Context, p string) (stream, error)
}

// fileInfo is what the tests compare of a stat.
type fileInfo struct {
	dir   bool
	size  int64
	mode  uint32 // permission bits
	nlink uint32
}

// nfsStatusErrno maps the NFSv4 statuses the tests expect back to the
// errno the server started from (the server's table, errors.go of
// package nfs4, read backwards).
var nfsStatusErrno = map[nfsv4.Nfsstat4]syscall.Errno{
	nfsv4.NFS4ERR_PERM:        syscall.EPERM,
	nfsv4.NFS4ERR_NOENT:       syscall.ENOENT,
	nfsv4.NFS4ERR_IO:          syscall.EIO,
	nfsv4.NFS4ERR_ACCESS:      syscall.EACCES,
	nfsv4.NFS4ERR_EXIST:       syscall.EEXIST,
	nfsv4.NFS4ERR_XDEV:        syscall.EXDEV,
	nfsv4.NFS4ERR_NOTDIR:      syscall.ENOTDIR,
	nfsv4.NFS4ERR_ISDIR:       syscall.EISDIR,
	nfsv4.NFS4ERR_INVAL:       syscall.EINVAL,
	nfsv4.NFS4ERR_NOTEMPTY:    syscall.ENOTEMPTY,
	nfsv4.NFS4ERR_STALE:       syscall.ESTALE,
	nfsv4.NFS4ERR_DENIED:      syscall.EAGAIN,
	nfsv4.NFS4ERR_DELAY:       syscall.EBUSY,
	nfsv4.NFS4ERR_SERVERFAULT: syscall.EIO,
	nfsv4.NFS4ERR_SYMLINK:     syscall.ELOOP,
	nfsv4.NFS4ERR_NAMETOOLONG: syscall.ENAMETOOLONG,
}

// nfsErrno turns an NFS status error into one that unwraps to its errno
// and names the operation that failed; other errors (a broken
// connection, a deadline) are returned as they are.
func nfsErrno(err error) error {
	var se *nfsclient.StatusError
	if errors.As(err, &se) {
		if e, ok := nfsStatusErrno[se.Status]; ok {
			return &statusErrno{se: se, errno: e}
		}
	}
	return err
}

// statusErrno is an NFS status error as its errno.
type statusErrno struct {
	se    *nfsclient.StatusError
	errno syscall.Errno
}

func (e *statusErrno) Error() string { return e.se.Error() }
func (e *statusErrno) Unwrap() error { return e.errno }

// nfsFS is a clientFS over one NFSv4.1 client.
type nfsFS struct {
	label string
	c     *nfsclient.Client
}

func (n *nfsFS) name() string { return n.label }

// split returns the handle of p's parent directory and p's last name.
func (n *nfsFS) split(ctx context.Context, p string) ([]byte, string, error) {
	dir, base := path.Split(p)
	fh, err := n.c.LookupPath(ctx, dir)
	if err != nil {
		return nil, "", nfsErrno(err)
	}
	return fh, base, nil
}

func (n *nfsFS) writeFile(ctx context.Context, p string, data []byte, sync bool) error {
	dir, base, err := n.split(ctx, p)
	if err != nil {
		return err
	}
	// UNCHECKED4 with a size of zero truncates a file that exists, as
	// open(O_CREAT|O_TRUNC) does (RFC 8881 §18.16.3).
	f, err := n.c.Create(ctx, dir, base, nfsclient.OpenOptions{Mode: nfsclient.Unchecked,
		Attrs: nfsclient.Attrs{}.WithMode(0o644).WithSize(0)})
	if err != nil {
		return nfsErrno(err)
	}
	werr := func() error {
		// Made durable as a kernel client does: a small file by FILE_SYNC
		// writes, a larger one by UNSTABLE writes and a COMMIT.
		stable := nfsv4.UNSTABLE4
		if sync && len(data) <= 64<<10 {
			stable = nfsv4.FILE_SYNC4
		}
		for off := 0; off < len(data); off += 256 << 10 {
			end := min(off+256<<10, len(data))
			if _, err := n.c.Write(ctx, f, uint64(off), data[off:end], stable); err != nil {
				return err
			}
		}
		if sync && stable == nfsv4.UNSTABLE4 {
			if _, err := n.c.Commit(ctx, f.FH, 0, 0); err != nil {
				return err
			}
		}
		return nil
	}()
	cerr := n.c.CloseFile(ctx, f)
	return nfsErrno(errors.Join(werr, cerr))
}

func (n *nfsFS) readFile(ctx context.Context, p string) ([]byte, error) {
	dir, base, err := n.split(ctx, p)
	if err != nil {
		return nil, err
	}
	f, err := n.c.Open(ctx, dir, base, nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	if err != nil {
		return nil, nfsErrno(err)
	}
	var out []byte
	rerr := func() error {
		for {
			b, eof, err := n.c.Read(ctx, f, uint64(len(out)), 256<<10)
			if err != nil {
				return err
			}
			out = append(out, b...)
			if eof || len(b) == 0 {
				return nil
			}
		}
	}()
	cerr := n.c.CloseFile(ctx, f)
	if err := errors.Join(rerr, cerr); err != nil {
		return nil, nfsErrno(err)
	}
	return out, nil
}

func (n *nfsFS) mkdir(ctx context.Context, p string, mode uint32) error {
	dir, base, err := n.split(ctx, p)
	if err != nil {
		return err
	}
	_, err = n.c.Mkdir(ctx, dir, base, nfsclient.Attrs{}.WithMode(mode))
	return nfsErrno(err)
}

func (n *nfsFS) rename(ctx context.Context, from, to string) error {
	fdir, fbase, err := n.split(ctx, from)
	if err != nil {
		return err
	}
	tdir, tbase, err := n.split(ctx, to)
	if err != nil {
		return err
	}
	return nfsErrno(n.c.Rename(ctx, fdir, fbase, tdir, tbase))
}

func (n *nfsFS) unlink(ctx context.Context, p string) error {
	dir, base, err := n.split(ctx, p)
	if err != nil {
		return err
	}
	return nfsErrno(n.c.Remove(ctx, dir, base))
}

func (n *nfsFS) rmdir(ctx context.Context, p string) error { return n.unlink(ctx, p) }

func (n *nfsFS) link(ctx context.Context, from, to string) error {
	fh, err := n.c.LookupPath(ctx, from)
	if err != nil {
		return nfsErrno(err)
	}
	dir, base, err := n.split(ctx, to)
	if err != nil {
		return err
	}
	return nfsErrno(n.c.Link(ctx, fh, dir, base))
}

func (n *nfsFS) truncate(ctx context.Context, p string, size int64) error {
	fh, err := n.c.LookupPath(ctx, p)
	if err != nil {
		return nfsErrno(err)
	}
	_, err = n.c.SetAttr(ctx, fh, nfsclient.Attrs{}.WithSize(uint64(size)))
	return nfsErrno(err)
}

func (n *nfsFS) chmod(ctx context.Context, p string, mode uint32) error {
	fh, err := n.c.LookupPath(ctx, p)
	if err != nil {
		return nfsErrno(err)
	}
	_, err = n.c.SetAttr(ctx, fh, nfsclient.Attrs{}.WithMode(mode))
	return nfsErrno(err)
}

func (n *nfsFS) stat(ctx context.Context, p string) (fileInfo, error) {
	_, a, err := n.c.StatPath(ctx, p, nfsclient.Bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE,
		nfsv4.FATTR4_MODE, nfsv4.FATTR4_NUMLINKS))
	if err != nil {
		return fileInfo{}, nfsErrno(err)
	}
	return fileInfo{dir: a.Type == nfsv4.NF4DIR, size: int64(a.Size), mode: a.Mode & 0o7777, nlink: a.NumLinks}, nil
}

func (n *nfsFS) readDir(ctx context.Context, p string) ([]string, error) {
	fh, err := n.c.LookupPath(ctx, p)
	if err != nil {
		return nil, nfsErrno(err)
	}
	ents, err := n.c.ReadDir(ctx, fh, nfsclient.Bitmap(nfsv4.FATTR4_TYPE))
	if err != nil {
		return nil, nfsErrno(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return names, nil
}

// fuseFS is a clientFS over a FUSE mount, through the kernel's system
// calls. The calls take no context: a hung one is caught by the caller's
// deadline (see bounded).
type fuseFS struct {
	label string
	mnt   string
}

func (f *fuseFS) name() string { return f.label }

func (f *fuseFS) path(p string) string { return filepath.Join(f.mnt, filepath.FromSlash(p)) }

func (f *fuseFS) writeFile(_ context.Context, p string, data []byte, sync bool) error {
	fl, err := os.OpenFile(f.path(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := fl.Write(data)
	if werr == nil && sync {
		werr = fl.Sync()
	}
	cerr := fl.Close()
	return errors.Join(werr, cerr)
}

func (f *fuseFS) readFile(_ context.Context, p string) ([]byte, error) {
	return os.ReadFile(f.path(p))
}

func (f *fuseFS) mkdir(_ context.Context, p string, mode uint32) error {
	return syscall.Mkdir(f.path(p), mode)
}

func (f *fuseFS) rename(_ context.Context, from, to string) error {
	return syscall.Rename(f.path(from), f.path(to))
}

func (f *fuseFS) unlink(_ context.Context, p string) error { return syscall.Unlink(f.path(p)) }
func (f *fuseFS) rmdir(_ context.Context, p string) error  { return syscall.Rmdir(f.path(p)) }

func (f *fuseFS) link(_ context.Context, from, to string) error {
	return syscall.Link(f.path(from), f.path(to))
}

func (f *fuseFS) truncate(_ context.Context, p string, size int64) error {
	return syscall.Truncate(f.path(p), size)
}

func (f *fuseFS) chmod(_ context.Context, p string, mode uint32) error {
	return syscall.Chmod(f.path(p), mode)
}

func (f *fuseFS) stat(_ context.Context, p string) (fileInfo, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(f.path(p), &st); err != nil {
		return fileInfo{}, err
	}
	return fileInfo{dir: st.Mode&syscall.S_IFMT == syscall.S_IFDIR, size: st.Size, mode: st.Mode & 0o7777,
		nlink: uint32(st.Nlink)}, nil
}

func (f *fuseFS) readDir(_ context.Context, p string) ([]string, error) {
	ents, err := os.ReadDir(f.path(p))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// clients returns a clientFS for each server of the cluster, in order.
func (c *cluster) clients() []clientFS {
	var out []clientFS
	for _, s := range c.servers {
		if s.mnt != "" {
			out = append(out, &fuseFS{label: s.name, mnt: s.mnt})
		} else {
			out = append(out, &nfsFS{label: s.name, c: s.nfs})
		}
	}
	return out
}

// isFUSE reports whether fs goes through a FUSE mount.
func isFUSE(fs clientFS) bool {
	_, ok := fs.(*fuseFS)
	return ok
}

// joinPath is p's child name; the root is "".
func joinPath(p, name string) string {
	if p == "" {
		return name
	}
	return p + "/" + name
}

// walk reads the whole tree through fs: every path to its info, and every
// file's content.
func walk(ctx context.Context, fs clientFS) (map[string]fileInfo, map[string][]byte, error) {
	infos, datas := map[string]fileInfo{}, map[string][]byte{}
	var visit func(dir string) error
	visit = func(dir string) error {
		names, err := fs.readDir(ctx, dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			if dir == "" && (name == "lost+found" || strings.HasPrefix(name, ".")) {
				continue
			}
			p := joinPath(dir, name)
			fi, err := fs.stat(ctx, p)
			if err != nil {
				return err
			}
			infos[p] = fi
			if fi.dir {
				if err := visit(p); err != nil {
					return err
				}
				continue
			}
			if datas[p], err = fs.readFile(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
	return infos, datas, visit("")
}

// stream is a file kept open for writing: writes at offsets, made durable
// by sync (NFS: UNSTABLE writes and COMMIT; FUSE: write and fsync).
type stream interface {
	writeAt(ctx context.Context, off int64, data []byte) error
	sync(ctx context.Context) error
	close(ctx context.Context) error
}

// create opens a new file p for a stream of writes.
func (n *nfsFS) create(ctx context.Context, p string) (stream, error) {
	dir, base, err := n.split(ctx, p)
	if err != nil {
		return nil, err
	}
	f, err := n.c.Create(ctx, dir, base, nfsclient.OpenOptions{Mode: nfsclient.Guarded,
		Attrs: nfsclient.Attrs{}.WithMode(0o644)})
	if err != nil {
		return nil, nfsErrno(err)
	}
	return &nfsStream{c: n.c, f: f}, nil
}

// nfsStream writes UNSTABLE and commits as a kernel client does: it
// keeps what it wrote since the last COMMIT, and when the COMMIT's write
// verifier is not the one every WRITE answered (the server may have lost
// them, RFC 8881 §18.32.3), it writes them again and commits again.
type nfsStream struct {
	c       *nfsclient.Client
	f       *nfsclient.OpenFile
	pending []pendingWrite // written since the last COMMIT
}

type pendingWrite struct {
	off  int64
	data []byte
	verf [8]byte
}

func (s *nfsStream) writeAt(ctx context.Context, off int64, data []byte) error {
	w, err := s.c.Write(ctx, s.f, uint64(off), data, nfsv4.UNSTABLE4)
	if err != nil {
		return nfsErrno(err)
	}
	s.pending = append(s.pending, pendingWrite{off, data, w.Verifier})
	return nil
}

func (s *nfsStream) sync(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		verf, err := s.c.Commit(ctx, s.f.FH, 0, 0)
		if err != nil {
			return nfsErrno(err)
		}
		same := true
		for _, w := range s.pending {
			same = same && w.verf == verf
		}
		if same {
			s.pending = s.pending[:0]
			return nil
		}
		if attempt == 3 {
			return errors.New("the write verifier changed at every COMMIT")
		}
		for i, w := range s.pending {
			r, err := s.c.Write(ctx, s.f, uint64(w.off), w.data, nfsv4.UNSTABLE4)
			if err != nil {
				return nfsErrno(err)
			}
			s.pending[i].verf = r.Verifier
		}
	}
}

func (s *nfsStream) close(ctx context.Context) error { return nfsErrno(s.c.CloseFile(ctx, s.f)) }

func (f *fuseFS) create(_ context.Context, p string) (stream, error) {
	fl, err := os.OpenFile(f.path(p), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return fuseStream{fl}, nil
}

type fuseStream struct{ f *os.File }

func (s fuseStream) writeAt(_ context.Context, off int64, data []byte) error {
	_, err := s.f.WriteAt(data, off)
	return err
}

func (s fuseStream) sync(context.Context) error  { return s.f.Sync() }
func (s fuseStream) close(context.Context) error { return s.f.Close() }
