package nfs4

import (
	"context"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// Data operations: READ, WRITE, COMMIT and the 4.2 SEEK, ALLOCATE,
// DEALLOCATE and COPY.

// maxCopy bounds one COPY; a client copies the rest with further COPYs.
const maxCopy = 64 << 20

func (q *request) read(a *nfsv4.Read4args) nfsv4.Read4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Read4res { return &nfsv4.Read4res_default{Status: st} }
	io, st := q.handleFor(a.Stateid, false)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer io.done()
	at, err := q.s.fs.GetAttr(q.ctx, q.cur)
	if err != nil {
		return fail(statusOf(err))
	}
	count := min(a.Count, maxIO)
	if q.sess != nil {
		count = min(count, max(q.sess.fore.CaMaxresponsesize, 1024)-512)
	}
	if a.Offset >= uint64(at.Size) || count == 0 {
		return &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: a.Offset >= uint64(at.Size), Data: []byte{}}}
	}
	n := min(uint64(count), uint64(at.Size)-a.Offset)
	buf := make([]byte, n)
	got, err := io.h.Read(q.ctx, buf, int64(a.Offset))
	if err != nil {
		return fail(statusOf(err))
	}
	eof := got < len(buf) || a.Offset+uint64(got) >= uint64(at.Size)
	return &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: eof, Data: buf[:got]}}
}

func (q *request) write(a *nfsv4.Write4args) nfsv4.Write4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Write4res { return &nfsv4.Write4res_default{Status: st} }
	if a.Offset > 1<<62 || a.Offset+uint64(len(a.Data)) > 1<<62 {
		return fail(nfsv4.NFS4ERR_FBIG)
	}
	io, st := q.handleFor(a.Stateid, true)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer io.done()
	n, err := q.writeAt(io.h, a.Data, int64(a.Offset))
	if err != nil {
		return fail(statusOf(err))
	}
	committed := nfsv4.StableHow4(nfsv4.UNSTABLE4)
	if a.Stable != nfsv4.UNSTABLE4 {
		if err := io.h.Fsync(q.ctx); err != nil {
			return fail(statusOf(err))
		}
		committed = nfsv4.FILE_SYNC4
	}
	return &nfsv4.Write4res_NFS4_OK{Resok4: nfsv4.Write4resok{Count: uint32(n), Committed: committed,
		Writeverf: q.s.writeVerf}}
}

// fsetid reports whether the request runs with CAP_FSETID, which keeps a
// file's set-id bits across its writes and truncates (vfs/setid.go). As
// knfsd gives it: to a request whose uid is 0 after root squash (or whose
// access point is configured with uid 0), and to no other.
func (q *request) fsetid() bool { return q.cred.Uid == 0 }

// writeAt writes p at off through h as the request's caller, clearing the
// file's set-id bits unless the caller has CAP_FSETID. A client sees the
// new mode by the change attribute, which the write moves anyway (the
// Linux client also drops its cached mode itself after a write to a
// set-id file).
func (q *request) writeAt(h *vfs.Handle, p []byte, off int64) (int, error) {
	if q.fsetid() {
		return h.Write(q.ctx, p, off)
	}
	n, _, err := h.WriteClearingSetID(q.ctx, q.cred, p, off)
	return n, err
}

// commit makes the current file's data durable. Any handle on the inode
// syncs all of it.
func (q *request) commit(a *nfsv4.Commit4args) nfsv4.Commit4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Commit4res { return &nfsv4.Commit4res_default{Status: st} }
	at, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	switch {
	case at.IsDir():
		return fail(nfsv4.NFS4ERR_ISDIR)
	case !at.IsRegular():
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	h, done := q.s.anyHandle(q.cur)
	if h == nil {
		var err error
		if h, err = q.s.fs.Open(q.ctx, vfs.Root, q.cur, syscall.O_RDONLY); err != nil {
			return fail(statusOf(err))
		}
		done = func() { h.Release(context.Background()) }
	}
	defer done()
	if err := h.Fsync(q.ctx); err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Commit4res_NFS4_OK{Resok4: nfsv4.Commit4resok{Writeverf: q.s.writeVerf}}
}

// anyHandle returns a handle some open state holds on ino, if any.
func (s *Server) anyHandle(ino vfs.Ino) (*vfs.Handle, func()) {
	t := s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.opensByIno[ino] {
		if o.h != nil && !o.dead {
			o.refs++
			return o.h, func() { s.unref(o) }
		}
	}
	return nil, nil
}

func (q *request) seek(a *nfsv4.Seek4args) nfsv4.Seek4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Seek4res { return &nfsv4.Seek4res_default{SaStatus: st} }
	whence := 3 // SEEK_DATA
	switch a.SaWhat {
	case nfsv4.NFS4_CONTENT_DATA:
	case nfsv4.NFS4_CONTENT_HOLE:
		whence = 4 // SEEK_HOLE
	default:
		return fail(nfsv4.NFS4ERR_UNION_NOTSUPP)
	}
	io, st := q.handleFor(a.SaStateid, false)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer io.done()
	if a.SaOffset > 1<<62 {
		return fail(nfsv4.NFS4ERR_NXIO)
	}
	pos, err := io.h.Seek(q.ctx, int64(a.SaOffset), whence)
	if err != nil {
		return fail(statusOf(err))
	}
	at, err := q.s.fs.GetAttr(q.ctx, q.cur)
	if err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Seek4res_NFS4_OK{Resok4: nfsv4.SeekRes4{SrEof: pos >= at.Size, SrOffset: uint64(pos)}}
}

// allocate implements ALLOCATE and (punch) DEALLOCATE.
func (q *request) allocate(s nfsv4.Stateid4, off, n uint64, punch bool) nfsv4.Nfsstat4 {
	if n == 0 || off > 1<<62 || n > 1<<62 || off+n > 1<<62 {
		return nfsv4.NFS4ERR_INVAL
	}
	io, st := q.handleFor(s, true)
	if st != nfsv4.NFS4_OK {
		return st
	}
	defer io.done()
	mode := uint32(0)
	if punch {
		mode = 0x1 | 0x2 // FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
	}
	return statusOf(io.h.Fallocate(q.ctx, mode, int64(off), int64(n)))
}

// copy implements an intra-server, synchronous COPY from the saved file to
// the current file through vfs reads and writes.
func (q *request) copy(a *nfsv4.Copy4args) nfsv4.Copy4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Copy4res { return &nfsv4.Copy4res_default{CrStatus: st} }
	if q.saved == 0 || q.cur == 0 {
		return fail(nfsv4.NFS4ERR_NOFILEHANDLE)
	}
	if len(a.CaSourceServer) > 0 {
		return fail(nfsv4.NFS4ERR_NOTSUPP) // inter-server copy
	}
	if st := q.sameAccessPoint(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	src, st := q.handleOn(q.saved, a.CaSrcStateid, false)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer src.done()
	dst, st := q.handleFor(a.CaDstStateid, true)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer dst.done()
	sa, err := q.s.fs.GetAttr(q.ctx, q.saved)
	if err != nil {
		return fail(statusOf(err))
	}
	if a.CaSrcOffset > uint64(sa.Size) || a.CaDstOffset > 1<<62 {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	count := a.CaCount
	if count == 0 || count > uint64(sa.Size)-a.CaSrcOffset { // no sum to wrap past 2^64
		count = uint64(sa.Size) - a.CaSrcOffset
	}
	if q.saved == q.cur && a.CaSrcOffset < a.CaDstOffset+count && a.CaDstOffset < a.CaSrcOffset+count {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	count = min(count, maxCopy)
	// One write, never exported half done (vfs.CopyRange); it clears
	// set-id bits as a WRITE by the same caller would (writeAt).
	var clearFor *vfs.Cred
	if !q.fsetid() {
		clearFor = &q.cred
	}
	n, err := vfs.CopyRange(q.ctx, src.h, int64(a.CaSrcOffset), dst.h, int64(a.CaDstOffset), int64(count), clearFor)
	if err != nil {
		return fail(statusOf(err))
	}
	done := uint64(n)
	if err := dst.h.Fsync(q.ctx); err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Copy4res_NFS4_OK{CrResok4: nfsv4.Copy4resok{
		CrResponse: nfsv4.WriteResponse4{WrCount: done, WrCommitted: nfsv4.FILE_SYNC4,
			WrWriteverf: q.s.writeVerf},
		CrRequirements: nfsv4.CopyRequirements4{CrConsecutive: true, CrSynchronous: true}}}
}
