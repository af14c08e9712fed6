package fuse

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"bucketfs/internal/locks"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

func (s *server) addFile(h *vfs.Handle) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.files[s.next] = h
	return s.next
}

func (s *server) file(fh uint64) *vfs.Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[fh]
}

func (s *server) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	flags := in.Flags
	if in.OpenFlags&fuse.OPEN_KILL_SUIDGID != 0 {
		// O_TRUNC without O_EXCL by someone without CAP_FSETID: if the
		// file exists, its truncate clears its set-id bits.
		flags |= vfs.ClearSetID
	}
	a, h, err := s.fs.Create(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), name, in.Mode&^in.Umask, flags)
	if err != nil {
		return status(err)
	}
	s.fillEntry(&a, &out.EntryOut)
	s.fs.Remember(a.Ino)
	out.Fh = s.addFile(h)
	return fuse.OK
}

// Open opens a file the kernel looked up. The kernel may still hold a name
// for a file the bucket deleted (an import removed it, and the kernel has
// not dropped its entry yet, or the open's own check with the bucket just
// found it gone): such an open answers ESTALE, and the kernel looks the
// path up again and retries once, so open(O_CREAT) makes the file anew and
// a plain open says ENOENT. A file unlinked or renamed away on the file
// side opens as it would on a local disk (an open racing a rename may get
// the replaced file).
func (s *server) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	ino := s.ino(in.NodeId)
	if s.deletedInBucket(ctx, ino) {
		return fuse.Status(syscall.ESTALE)
	}
	flags := in.Flags
	if in.Mode&fuse.OPEN_KILL_SUIDGID != 0 {
		// An O_TRUNC by someone without CAP_FSETID, when the kernel hands
		// the truncate to the open (it does not: we leave ATOMIC_O_TRUNC
		// off, so it sends a setattr with FATTR_KILL_SUIDGID instead).
		flags |= vfs.ClearSetID
	}
	h, err := s.fs.Open(ctx, s.cred(&in.InHeader), ino, flags)
	if errors.Is(err, syscall.ENOENT) && s.deletedInBucket(ctx, ino) {
		return fuse.Status(syscall.ESTALE)
	}
	if err != nil {
		return status(err)
	}
	if h.KeepCache() {
		// The kernel keeps its pages of the file across opens; imports of
		// new versions invalidate them.
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
	out.Fh = s.addFile(h)
	return fuse.OK
}

// deletedInBucket reports whether ino lost its names to a delete in the
// bucket.
func (s *server) deletedInBucket(ctx context.Context, ino vfs.Ino) bool {
	a, err := s.fs.GetAttr(ctx, ino)
	return err == nil && a.Nlink == 0 && a.Has(meta.DeletedInBucket)
}

func (s *server) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h := s.file(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	sh, err := h.ReadShared(ctx, buf[:in.Size], int64(in.Offset))
	if err != nil {
		return nil, status(err)
	}
	if sh.Release == nil {
		return fuse.ReadResultData(sh.Bufs[0]), fuse.OK
	}
	return sharedResult(sh), fuse.OK
}

// sharedResult is a read reply whose bytes are the engine's read-ahead
// buffers: go-fuse writes them to the kernel with writev (its Slices
// interface) and then calls Done, which hands them back.
type sharedResult vfs.Shared

func (r sharedResult) Slices() ([][]byte, fuse.Status) { return r.Bufs, fuse.OK }
func (r sharedResult) Done()                           { r.Release() }

func (r sharedResult) Size() int {
	n := 0
	for _, b := range r.Bufs {
		n += len(b)
	}
	return n
}

// Bytes is the copying fallback go-fuse uses when it cannot write slices.
func (r sharedResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, b := range r.Bufs {
		buf = append(buf, b...)
	}
	return buf, fuse.OK
}

func (s *server) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h := s.file(in.Fh)
	if h == nil {
		return 0, fuse.EBADF
	}
	ctx, done := uninterrupted()
	defer done()
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID == 0 {
		n, err := h.Write(ctx, data, int64(in.Offset))
		return uint32(n), status(err)
	}
	// The writer lacks CAP_FSETID (vfs/setid.go).
	n, cleared, err := h.WriteClearingSetID(ctx, s.cred(&in.InHeader), data, int64(in.Offset))
	if cleared {
		// The kernel drops only its cached size and times after a write,
		// so a stat asking for the mode alone (stat -c %a) would show the
		// set-id bits until the attributes time out. Invalidating its
		// attributes before the write returns (without its pages: they
		// hold what was just written) makes the next stat ask us. This
		// takes no lock the writer holds.
		s.srv.InodeNotify(in.NodeId, -1, 0)
	}
	return uint32(n), status(err)
}

// CopyFileRange serves copy_file_range(2) between two files of the mount
// as one request, so the copy is one write (vfs.CopyRange). Without it the
// kernel copies through a pipe, in writes of 64 KiB that look finished, and
// a flush could export the destination half copied.
func (s *server) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	src, dst := s.file(in.FhIn), s.file(in.FhOut)
	if src == nil || dst == nil {
		return 0, fuse.EBADF
	}
	if in.OffIn > 1<<62 || in.OffOut > 1<<62 {
		return 0, fuse.EINVAL
	}
	ctx, done := uninterrupted()
	defer done()
	// The kernel clears dst's set-id bits itself first (a setattr with
	// FATTR_KILL_SUIDGID) when the copier lacks CAP_FSETID.
	n, err := vfs.CopyRange(ctx, src, int64(in.OffIn), dst, int64(in.OffOut), int64(min(in.Len, 1<<30)), nil)
	return uint32(n), status(err)
}

func (s *server) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	// close(2) of one descriptor drops that owner's record locks.
	s.fs.ReleaseLocks(s.ino(in.NodeId), locks.Owner{ID: in.LockOwner})
	// And every write(2) through it has returned.
	if h := s.file(in.Fh); h != nil {
		ctx, done := uninterrupted()
		defer done()
		return status(h.Closed(ctx))
	}
	return fuse.OK
}

func (s *server) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h := s.file(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	ctx, done := uninterrupted()
	defer done()
	return status(h.Fsync(ctx))
}

func (s *server) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	s.mu.Lock()
	h := s.files[in.Fh]
	delete(s.files, in.Fh)
	s.mu.Unlock()
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		s.fs.Flock(context.Background(), s.ino(in.NodeId), locks.Owner{ID: in.LockOwner}, locks.Unlock, false)
	}
	if h != nil {
		h.Release(context.Background())
	}
}

func (s *server) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	h := s.file(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	ctx, done := uninterrupted()
	defer done()
	return status(h.Fallocate(ctx, in.Mode, int64(in.Offset), int64(in.Length)))
}

func (s *server) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	h := s.file(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	off, err := h.Seek(ctx, int64(in.Offset), int(in.Whence))
	out.Offset = uint64(off)
	return status(err)
}

func lockOf(in *fuse.LkIn) locks.Lock {
	l := locks.Lock{Start: in.Lk.Start, End: in.Lk.End, Pid: in.Lk.Pid, Owner: locks.Owner{ID: in.Owner}}
	switch in.Lk.Typ {
	case syscall.F_RDLCK:
		l.Kind = locks.Read
	case syscall.F_WRLCK:
		l.Kind = locks.Write
	default:
		l.Kind = locks.Unlock
	}
	return l
}

func (s *server) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	c, ok, err := s.fs.TestLock(anySignal{Context: context.Background(), done: cancel}, s.ino(in.NodeId), lockOf(in))
	if err != nil {
		return status(err)
	}
	if !ok {
		out.Lk.Typ = syscall.F_UNLCK
		return fuse.OK
	}
	out.Lk.Start, out.Lk.End, out.Lk.Pid = c.Start, c.End, c.Pid
	out.Lk.Typ = syscall.F_RDLCK
	if c.Kind == locks.Write {
		out.Lk.Typ = syscall.F_WRLCK
	}
	return fuse.OK
}

func (s *server) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return s.setLk(cancel, in, false)
}

func (s *server) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return s.setLk(cancel, in, true)
}

// setLk ends a lock wait on any signal, with EINTR, as POSIX says for
// F_SETLKW and flock (see interrupt.go).
func (s *server) setLk(cancel <-chan struct{}, in *fuse.LkIn, wait bool) fuse.Status {
	ctx := anySignal{Context: context.Background(), done: cancel}
	l := lockOf(in)
	if in.LkFlags&fuse.FUSE_LK_FLOCK != 0 {
		return status(s.fs.Flock(ctx, s.ino(in.NodeId), l.Owner, l.Kind, wait))
	}
	return status(s.fs.SetLock(ctx, s.ino(in.NodeId), l, wait))
}
