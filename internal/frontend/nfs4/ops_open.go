package nfs4

import (
	"context"
	"errors"
	"math"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE and CLOSE. An open state holds one
// vfs handle with at least the access the state grants.

// openFlags are the open(2) flags for share access bits: a write open
// also reads when the caller may (the client reads around partial page
// writes through it).
func (q *request) openFlags(access uint32, ino vfs.Ino) uint32 {
	switch access {
	case nfsv4.OPEN4_SHARE_ACCESS_READ:
		return syscall.O_RDONLY
	case nfsv4.OPEN4_SHARE_ACCESS_WRITE:
		if ino != 0 && q.s.fs.Access(q.ctx, q.cred, ino, 4) == nil {
			return syscall.O_RDWR
		}
		return syscall.O_WRONLY
	}
	return syscall.O_RDWR
}

func (q *request) open(a *nfsv4.Open4args) nfsv4.Open4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Open4res { return &nfsv4.Open4res_default{Status: st} }
	access, deny := a.ShareAccess&nfsv4.OPEN4_SHARE_ACCESS_BOTH, a.ShareDeny
	if access == 0 || deny > nfsv4.OPEN4_SHARE_DENY_BOTH {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	t := q.s.state
	t.mu.Lock()
	cl, st := q.clientFor(a.Owner.Clientid)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return fail(st)
	}
	key := string(a.Owner.Owner)
	oo := cl.openOwners[key]
	if oo == nil {
		oo = &openOwner{client: cl, key: key, seq: newSeqOwner(a.Seqid), confirmed: q.minor >= 1}
		cl.openOwners[key] = oo
	}
	if st := q.checkOwnerSeq(&oo.seq, a.Seqid); st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return fail(st)
	}
	_, reclaim := a.Claim.(*nfsv4.OpenClaim4_CLAIM_PREVIOUS)
	if reclaim {
		st = t.mayReclaim(cl)
	} else {
		st = t.noNewStateFor(cl)
	}
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		if reclaim && st == nfsv4.NFS4ERR_NO_GRACE {
			q.s.explainRefusedReclaim(q.ctx, cl)
		}
		return fail(st)
	}
	t.mu.Unlock()
	if st := q.s.recordClient(q.ctx, cl); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	defer q.s.granted(cl)

	var (
		h       *vfs.Handle
		ino     vfs.Ino
		cinfo   nfsv4.ChangeInfo4
		attrset attrMask
	)
	switch c := a.Claim.(type) {
	case *nfsv4.OpenClaim4_CLAIM_NULL:
		dir, st := q.curDir()
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		if st := checkName(c.File); st != nfsv4.NFS4_OK {
			return fail(st)
		}
		before := changeAttr(&dir)
		if how, ok := a.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok {
			h, ino, attrset, st = q.openCreate(c.File, access, how.How)
		} else {
			h, ino, st = q.openName(c.File, access)
		}
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		cinfo = q.cinfo(q.cur, before)
	case *nfsv4.OpenClaim4_CLAIM_FH:
		if _, ok := a.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		var st nfsv4.Nfsstat4
		if h, st = q.openCurrent(access); st != nfsv4.NFS4_OK {
			return fail(st)
		}
		ino = q.cur
	case *nfsv4.OpenClaim4_CLAIM_PREVIOUS:
		// A reclaim of an open the client held before the restart: the
		// current filehandle is the file (RFC 8881 18.16.3). No
		// delegation was ever granted, so none can be reclaimed.
		if c.DelegateType != nfsv4.OPEN_DELEGATE_NONE {
			return fail(nfsv4.NFS4ERR_RECLAIM_BAD)
		}
		if _, ok := a.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok {
			return fail(nfsv4.NFS4ERR_INVAL)
		}
		var st nfsv4.Nfsstat4
		if h, st = q.openCurrent(access); st != nfsv4.NFS4_OK {
			return fail(st)
		}
		ino = q.cur
		// A reclaimed open-owner needs no OPEN_CONFIRM: it was confirmed
		// before the restart.
		t.mu.Lock()
		oo.confirmed = true
		t.mu.Unlock()
	default:
		return fail(nfsv4.NFS4ERR_NOTSUPP) // delegations are never granted
	}

	sid, confirm, st := q.s.addOpen(q.ctx, oo, ino, access, deny, h)
	if st == nfsv4.NFS4ERR_SHARE_DENIED && reclaim {
		// The open the client held before the restart conflicts with one
		// granted since (here, or on another server of the file system):
		// a retry would not help, and one of the two clients claims more
		// than it held (RFC 8881 15.1.9.5; RFC 7530 names the same error).
		st = nfsv4.NFS4ERR_RECLAIM_CONFLICT
	}
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	q.setCur(ino)
	q.setCurSid(sid)
	flags := uint32(nfsv4.OPEN4_RESULT_LOCKTYPE_POSIX)
	if confirm {
		flags |= nfsv4.OPEN4_RESULT_CONFIRM
	}
	return &nfsv4.Open4res_NFS4_OK{Resok4: nfsv4.Open4resok{Stateid: sid, Cinfo: cinfo, Rflags: flags,
		Attrset: attrset.words(), Delegation: &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE{}}}
}

// openCurrent opens the current file (CLAIM_FH, CLAIM_PREVIOUS).
func (q *request) openCurrent(access uint32) (*vfs.Handle, nfsv4.Nfsstat4) {
	at, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	if st := q.openable(&at); st != nfsv4.NFS4_OK {
		return nil, st
	}
	h, err := q.s.fs.Open(q.ctx, q.cred, q.cur, q.openFlags(access, q.cur))
	if err != nil {
		return nil, statusOf(err)
	}
	return h, nfsv4.NFS4_OK
}

// openable checks that an object can be opened: only regular files can.
func (q *request) openable(a *vfs.Attr) nfsv4.Nfsstat4 {
	switch ftype(a) {
	case nfsv4.NF4REG:
		return nfsv4.NFS4_OK
	case nfsv4.NF4DIR:
		return nfsv4.NFS4ERR_ISDIR
	case nfsv4.NF4LNK:
		return nfsv4.NFS4ERR_SYMLINK
	}
	if q.minor >= 1 {
		return nfsv4.NFS4ERR_WRONG_TYPE
	}
	return nfsv4.NFS4ERR_INVAL
}

// openName opens an existing file in the current directory.
func (q *request) openName(name string, access uint32) (*vfs.Handle, vfs.Ino, nfsv4.Nfsstat4) {
	a, err := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name)
	if err != nil {
		return nil, 0, statusOf(err)
	}
	if st := q.openable(&a); st != nfsv4.NFS4_OK {
		return nil, 0, st
	}
	h, err := q.s.fs.Open(q.ctx, q.cred, a.Ino, q.openFlags(access, a.Ino))
	if err != nil {
		return nil, 0, statusOf(err)
	}
	return h, a.Ino, nfsv4.NFS4_OK
}

// verfTimes are the atime and mtime an exclusive create stores its
// verifier in, until the client sets the real times.
func verfTimes(v [8]byte) (atime, mtime int64) {
	return int64(uint32(v[0])<<24|uint32(v[1])<<16|uint32(v[2])<<8|uint32(v[3])) * 1e9,
		int64(uint32(v[4])<<24|uint32(v[5])<<16|uint32(v[6])<<8|uint32(v[7])) * 1e9
}

// openCreate implements OPEN4_CREATE in the current directory.
func (q *request) openCreate(name string, access uint32, how nfsv4.Createhow4) (*vfs.Handle, vfs.Ino, attrMask, nfsv4.Nfsstat4) {
	var (
		sa    setAttrs
		st    nfsv4.Nfsstat4
		excl  bool
		verf  *[8]byte
		flags = q.openFlags(access, 0)
	)
	switch c := how.(type) {
	case *nfsv4.Createhow4_UNCHECKED4:
		sa, st = q.decodeSetAttrs(&c.Createattrs)
	case *nfsv4.Createhow4_GUARDED4:
		sa, st = q.decodeSetAttrs(&c.Createattrs)
		excl = true
	case *nfsv4.Createhow4_EXCLUSIVE4:
		excl, verf = true, &c.Createverf
	case *nfsv4.Createhow4_EXCLUSIVE4_1:
		if q.minor == 0 {
			return nil, 0, attrMask{}, nfsv4.NFS4ERR_INVAL
		}
		sa, st = q.decodeSetAttrs(&c.ChCreateboth.CvaAttrs)
		if st == nfsv4.NFS4_OK && sa.in.Valid&(vfs.SetAtime|vfs.SetMtime|vfs.SetAtimeNow|vfs.SetMtimeNow) != 0 {
			st = nfsv4.NFS4ERR_INVAL
		}
		excl, verf = true, &c.ChCreateboth.CvaVerf
	default:
		st = nfsv4.NFS4ERR_INVAL
	}
	if st != nfsv4.NFS4_OK {
		return nil, 0, attrMask{}, st
	}
	mode := uint32(0o644)
	if sa.in.Valid&vfs.SetMode != 0 {
		mode = sa.in.Mode
	}
	if excl {
		flags |= syscall.O_EXCL
	}
	truncate := sa.in.Valid&vfs.SetSize != 0 && sa.in.Size == 0
	if truncate {
		flags |= syscall.O_TRUNC
		if !q.fsetid() {
			flags |= vfs.ClearSetID
		}
	}
	_, lookErr := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name)
	existed := lookErr == nil
	a, h, err := q.s.fs.Create(q.ctx, q.cred, q.cur, name, mode, flags)
	if errors.Is(err, syscall.EEXIST) && verf != nil {
		// A retransmitted exclusive create finds its own file.
		ex, lerr := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name)
		if lerr != nil {
			return nil, 0, attrMask{}, statusOf(lerr)
		}
		at, mt := verfTimes(*verf)
		if !ex.IsRegular() || ex.Atime != at || ex.Mtime != mt {
			return nil, 0, attrMask{}, nfsv4.NFS4ERR_EXIST
		}
		h, err := q.s.fs.Open(q.ctx, q.cred, ex.Ino, flags&^(syscall.O_EXCL|syscall.O_TRUNC))
		if err != nil {
			return nil, 0, attrMask{}, statusOf(err)
		}
		return h, ex.Ino, attrMask{}, nfsv4.NFS4_OK
	}
	if err != nil {
		return nil, 0, attrMask{}, statusOf(err)
	}
	if !a.IsRegular() {
		h.Release(q.ctx)
		return nil, 0, attrMask{}, q.openable(&a)
	}
	set := attrMask{}
	if !existed {
		rest := sa.in
		rest.Valid &^= vfs.SetMode // given to Create
		if rest.Valid&vfs.SetSize != 0 && rest.Size == 0 {
			rest.Valid &^= vfs.SetSize // a new file is empty already
		}
		rest.Handle = h // a size in createattrs sets the new file's size (RFC 7530 16.16.5)
		if verf != nil {
			rest.Valid |= vfs.SetAtime | vfs.SetMtime
			rest.Atime, rest.Mtime = verfTimes(*verf)
		}
		if rest.Valid != 0 {
			if _, err := q.s.fs.SetAttr(q.ctx, q.cred, a.Ino, rest); err != nil {
				h.Release(q.ctx)
				return nil, 0, attrMask{}, statusOf(err)
			}
		}
		set = sa.set
	} else if truncate {
		set.set(nfsv4.FATTR4_SIZE)
	}
	return h, a.Ino, set, nfsv4.NFS4_OK
}

// addOpen records an open of ino by oo with handle h: a new open state, or
// an upgrade of the owner's existing one. Share reservations of other
// owners are checked, those of the other servers' owners too when the
// file system is shared (shares.go). It reports whether a 4.0 owner must
// confirm.
func (s *Server) addOpen(ctx context.Context, oo *openOwner, ino vfs.Ino, access, deny uint32, h *vfs.Handle) (nfsv4.Stateid4, bool, nfsv4.Nfsstat4) {
	if !s.fs.Shared() {
		return s.addOpenHere(oo, ino, access, deny, h)
	}
	s.shares.mu.Lock()
	defer s.shares.mu.Unlock()
	if st := s.reserveShares(ctx, ino, access, deny); st != nfsv4.NFS4_OK {
		h.Release(context.Background())
		return nfsv4.Stateid4{}, false, st
	}
	sid, confirm, st := s.addOpenHere(oo, ino, access, deny, h)
	if st != nfsv4.NFS4_OK {
		s.republishSharesLocked(ino) // what was reserved for it
	}
	return sid, confirm, st
}

// addOpenHere is addOpen among this server's owners.
func (s *Server) addOpenHere(oo *openOwner, ino vfs.Ino, access, deny uint32, h *vfs.Handle) (nfsv4.Stateid4, bool, nfsv4.Nfsstat4) {
	t := s.state
	t.mu.Lock()
	if t.clients[oo.client.id] != oo.client {
		t.mu.Unlock()
		h.Release(context.Background())
		return nfsv4.Stateid4{}, false, nfsv4.NFS4ERR_EXPIRED
	}
	for _, o := range t.opensByIno[ino] {
		// Share reservations bind every open, the owner's own too (RFC
		// 7530 9.9): an owner that denies writes cannot then open for
		// writing.
		if o.deny&access != 0 || o.access&deny != 0 {
			t.mu.Unlock()
			h.Release(context.Background())
			return nfsv4.Stateid4{}, false, nfsv4.NFS4ERR_SHARE_DENIED
		}
	}
	k := openKey{oo.key, ino}
	o := oo.client.opens[k]
	var spare *vfs.Handle
	if o == nil {
		o = &openState{other: t.newOther(oo.client), seq: 1, owner: oo, ino: ino, access: access, deny: deny, h: h,
			opened: 1 << access, denied: 1 << deny, locks: map[*lockOwner]*lockState{}}
		oo.client.opens[k] = o
		t.states[o.other] = o
		t.opensByIno[ino] = append(t.opensByIno[ino], o)
	} else {
		o.access |= access
		o.deny |= deny
		o.opened |= 1 << access
		o.denied |= 1 << deny
		o.seq = bumpSeq(o.seq)
		if (o.access&nfsv4.OPEN4_SHARE_ACCESS_WRITE != 0 && !o.h.Writable()) ||
			(o.access&nfsv4.OPEN4_SHARE_ACCESS_READ != 0 && !o.h.Readable()) {
			o.retired = append(o.retired, o.h)
			o.h = h
		} else {
			spare = h
		}
	}
	res := sid(o.other, o.seq)
	confirm := !oo.confirmed
	hs := o.takeHandles()
	t.mu.Unlock()
	if spare != nil {
		hs = append(hs, spare)
	}
	for _, x := range hs {
		x.Release(context.Background())
	}
	return res, confirm, nfsv4.NFS4_OK
}

func (q *request) openConfirm(a *nfsv4.OpenConfirm4args) nfsv4.OpenConfirm4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.OpenConfirm4res { return &nfsv4.OpenConfirm4res_default{Status: st} }
	if st := q.needFH(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	o, st := seqStateOf[*openState](q, a.OpenStateid, a.Seqid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if o.owner.confirmed {
		// Only an owner's first OPEN is confirmed (RFC 7530 16.18.5).
		return fail(nfsv4.NFS4ERR_BAD_STATEID)
	}
	o.owner.confirmed = true
	o.seq = bumpSeq(o.seq)
	return &nfsv4.OpenConfirm4res_NFS4_OK{Resok4: nfsv4.OpenConfirm4resok{OpenStateid: sid(o.other, o.seq)}}
}

func (q *request) openDowngrade(a *nfsv4.OpenDowngrade4args) nfsv4.OpenDowngrade4res {
	res := q.openDowngradeHere(a)
	if _, ok := res.(*nfsv4.OpenDowngrade4res_NFS4_OK); ok {
		q.s.republishShares(q.cur)
	}
	return res
}

// openDowngradeHere is OPEN_DOWNGRADE of the open state.
func (q *request) openDowngradeHere(a *nfsv4.OpenDowngrade4args) nfsv4.OpenDowngrade4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.OpenDowngrade4res { return &nfsv4.OpenDowngrade4res_default{Status: st} }
	if st := q.needFH(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	access := a.ShareAccess & nfsv4.OPEN4_SHARE_ACCESS_BOTH
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	o, st := seqStateOf[*openState](q, a.OpenStateid, a.Seqid)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	deny := a.ShareDeny
	if o.opened&(1<<access) == 0 || o.denied&(1<<deny) == 0 {
		// Only to modes this state was opened with (an upgrade from
		// READ to BOTH may go back to READ, an OPEN of BOTH may not).
		// Those lie within the modes held, and none is empty access or
		// an unknown deny value.
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	o.access, o.deny = access, deny
	// The modes left are those within the new ones.
	o.opened, o.denied = withinModes(o.opened, access), withinModes(o.denied, deny)
	o.seq = bumpSeq(o.seq)
	res := sid(o.other, o.seq)
	q.setCurSid(res)
	return &nfsv4.OpenDowngrade4res_NFS4_OK{Resok4: nfsv4.OpenDowngrade4resok{OpenStateid: res}}
}

// withinModes keeps the bits 1<<v of set whose share value v lies within
// the share bits held.
func withinModes(set uint8, held uint32) uint8 {
	var out uint8
	for v := uint32(0); v < 4; v++ {
		if set&(1<<v) != 0 && v&^held == 0 {
			out |= 1 << v
		}
	}
	return out
}

func (q *request) close(a *nfsv4.Close4args) nfsv4.Close4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Close4res { return &nfsv4.Close4res_default{Status: st} }
	if st := q.needFH(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	t := q.s.state
	t.mu.Lock()
	o, st := seqStateOf[*openState](q, a.OpenStateid, a.Seqid)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return fail(st)
	}
	o.seq = bumpSeq(o.seq)
	res := sid(o.other, o.seq)
	if q.minor >= 1 {
		// The stateid CLOSE returns is of no use (RFC 8881 18.2.4).
		res = nfsv4.Stateid4{Seqid: math.MaxUint32}
	} else {
		oo := o.owner
		if oo.hasLastClosed {
			delete(t.closed, oo.lastClosed)
		}
		oo.lastClosed, oo.hasLastClosed = o.other, true
		t.closed[o.other] = oo
	}
	// Locks the open-owner's lock-owners still hold on the file go with
	// the open (RFC 8881 18.2.3 and RFC 7530 16.2.4 allow either this or
	// NFS4ERR_LOCKS_HELD; see doc.go).
	ls := t.removeOpen(o)
	t.mu.Unlock()
	for _, l := range ls {
		q.s.fs.ReleaseLocks(l.ino, l.owner.vfsOwner())
	}
	q.s.releaseOpens([]*openState{o})
	return &nfsv4.Close4res_NFS4_OK{OpenStateid: res}
}
