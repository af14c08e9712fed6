package nfs4

import (
	"context"
	"errors"
	"math"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/locks"
	"bucketfs/internal/vfs"
)

// Byte-range locks: LOCK, LOCKT, LOCKU, RELEASE_LOCKOWNER. The locks live
// in vfs under locks.Owner{ID: lock-owner id, Client: client id}, so they
// conflict with other clients' and with FUSE's.

// lockRange converts an NFS offset and length to an inclusive range.
func lockRange(off, length uint64) (start, end uint64, st nfsv4.Nfsstat4) {
	switch {
	case length == 0:
		return 0, 0, nfsv4.NFS4ERR_INVAL
	case length == math.MaxUint64:
		return off, locks.ToEOF, nfsv4.NFS4_OK
	case length-1 > math.MaxUint64-off:
		return 0, 0, nfsv4.NFS4ERR_INVAL
	}
	return off, off + length - 1, nfsv4.NFS4_OK
}

func lockKind(t nfsv4.NfsLockType4) (locks.Kind, bool) {
	switch t {
	case nfsv4.READ_LT, nfsv4.READW_LT:
		return locks.Read, true
	case nfsv4.WRITE_LT, nfsv4.WRITEW_LT:
		return locks.Write, true
	}
	return 0, false
}

// denied describes the lock that conflicts with l.
func (s *Server) denied(ctx context.Context, ino vfs.Ino, l locks.Lock) nfsv4.Lock4denied {
	c, ok, err := s.fs.TestLock(ctx, ino, l)
	if err != nil || !ok {
		c = l // released meanwhile (or unknown); report the request's own range
	}
	d := nfsv4.Lock4denied{Offset: c.Start, Length: math.MaxUint64, Locktype: nfsv4.WRITE_LT}
	if c.End != locks.ToEOF {
		d.Length = c.End - c.Start + 1
	}
	if c.Kind == locks.Read {
		d.Locktype = nfsv4.READ_LT
	}
	s.state.mu.Lock()
	if lo := s.state.lockOwners[c.Owner.ID]; lo != nil && lo.client.id == c.Owner.Client {
		d.Owner = nfsv4.StateOwner4{Clientid: lo.client.id, Owner: []byte(lo.key)}
	} else {
		d.Owner = nfsv4.StateOwner4{Clientid: c.Owner.Client, Owner: []byte("local")}
	}
	s.state.mu.Unlock()
	return d
}

// lockArgs checks what LOCK, LOCKT and LOCKU have in common: the current
// filehandle is a regular file, the lock type and the range are valid. It
// returns the lock they describe, without an owner.
func (q *request) lockArgs(lt nfsv4.NfsLockType4, off, length uint64) (locks.Lock, nfsv4.Nfsstat4) {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return locks.Lock{}, st
	}
	if a.IsDir() {
		return locks.Lock{}, nfsv4.NFS4ERR_ISDIR
	}
	if !a.IsRegular() {
		return locks.Lock{}, nfsv4.NFS4ERR_INVAL
	}
	kind, ok := lockKind(lt)
	if !ok {
		return locks.Lock{}, nfsv4.NFS4ERR_INVAL
	}
	start, end, st := lockRange(off, length)
	if st != nfsv4.NFS4_OK {
		return locks.Lock{}, st
	}
	return locks.Lock{Start: start, End: end, Kind: kind}, nfsv4.NFS4_OK
}

func (q *request) lock(a *nfsv4.Lock4args) nfsv4.Lock4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Lock4res { return &nfsv4.Lock4res_default{Status: st} }
	l, st := q.lockArgs(a.Locktype, a.Offset, a.Length)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	ls, fresh, st := q.lockStateFor(a.Locker)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	// A reclaim during the grace period takes back a lock held before a
	// restart; any other LOCK waits for the grace period to end, and for
	// a 4.1 client's RECLAIM_COMPLETE.
	t := q.s.state
	t.mu.Lock()
	if a.Reclaim {
		st = t.mayReclaim(ls.owner.client)
	} else {
		st = t.noNewStateFor(ls.owner.client)
	}
	t.mu.Unlock()
	if st != nfsv4.NFS4_OK {
		q.dropFresh(ls, fresh)
		if a.Reclaim && st == nfsv4.NFS4ERR_NO_GRACE {
			q.s.explainRefusedReclaim(q.ctx, ls.owner.client)
		}
		return fail(st)
	}
	if need := map[locks.Kind]uint32{locks.Read: nfsv4.OPEN4_SHARE_ACCESS_READ,
		locks.Write: nfsv4.OPEN4_SHARE_ACCESS_WRITE}[l.Kind]; ls.open.access&need == 0 {
		q.dropFresh(ls, fresh)
		return fail(nfsv4.NFS4ERR_OPENMODE)
	}
	l.Owner = ls.owner.vfsOwner()
	if a.Reclaim {
		if st := q.s.lockReclaimable(q.ctx, ls.ino, l); st != nfsv4.NFS4_OK {
			q.dropFresh(ls, fresh)
			return fail(st)
		}
	}
	if err := q.s.fs.SetLock(q.ctx, ls.ino, l, false); err != nil {
		q.dropFresh(ls, fresh)
		switch {
		case errors.Is(err, locks.ErrWouldBlock) && a.Reclaim:
			// A lock held before the restart conflicts with one granted
			// since: NFS4ERR_DENIED would have the client retry what
			// cannot succeed (see grace.go).
			return fail(nfsv4.NFS4ERR_RECLAIM_CONFLICT)
		case errors.Is(err, locks.ErrWouldBlock):
			return &nfsv4.Lock4res_NFS4ERR_DENIED{Denied: q.s.denied(q.ctx, ls.ino, l)}
		}
		return fail(statusOf(err))
	}
	if a.Reclaim {
		// Another server may have dropped the earlier run's locks on the
		// file between the check above and this grant: then this grant
		// is taken back (with whatever the lock-owner held in the range
		// before, in this rare race).
		if dropped, err := q.s.locksDropped(q.ctx, ls.ino); err != nil || dropped {
			un := l
			un.Kind = locks.Unlock
			if uerr := q.s.fs.SetLock(q.ctx, ls.ino, un, false); uerr != nil {
				q.s.log.Warn("take back a reclaimed lock", "ino", ls.ino, "err", uerr)
			}
			q.dropFresh(ls, fresh)
			if err != nil {
				return fail(statusOf(err))
			}
			return fail(nfsv4.NFS4ERR_NO_GRACE)
		}
	}
	t.mu.Lock()
	if !fresh {
		ls.seq = bumpSeq(ls.seq)
	}
	res := sid(ls.other, ls.seq)
	t.mu.Unlock()
	q.setCurSid(res)
	return &nfsv4.Lock4res_NFS4_OK{Resok4: nfsv4.Lock4resok{LockStateid: res}}
}

// lockStateFor finds or makes the lock state a LOCK names: from an open
// stateid and a (possibly new) lock-owner, or from an existing lock
// stateid. fresh reports a lock state made by this call.
func (q *request) lockStateFor(lk nfsv4.Locker4) (ls *lockState, fresh bool, st nfsv4.Nfsstat4) {
	t := q.s.state
	switch l := lk.(type) {
	case *nfsv4.Locker4_TRUE:
		t.mu.Lock()
		defer t.mu.Unlock()
		// The open-owner sequences this request (RFC 7530 16.10.4).
		o, st := seqStateOf[*openState](q, l.OpenOwner.OpenStateid, l.OpenOwner.OpenSeqid)
		if st != nfsv4.NFS4_OK {
			return nil, false, st
		}
		if o.dead {
			return nil, false, nfsv4.NFS4ERR_BAD_STATEID
		}
		cl := o.owner.client
		if q.minor == 0 && l.OpenOwner.LockOwner.Clientid != cl.id {
			return nil, false, nfsv4.NFS4ERR_STALE_CLIENTID
		}
		key := string(l.OpenOwner.LockOwner.Owner)
		lo := cl.lockOwners[key]
		if lo == nil {
			// lock_seqid is the new lock-owner's first seqid, used by
			// this request.
			lo = &lockOwner{client: cl, key: key, id: t.newID(), seq: seqOwner{seqid: l.OpenOwner.LockSeqid}}
			cl.lockOwners[key] = lo
			t.lockOwners[lo.id] = lo
		} else if q.minor == 0 {
			switch {
			case !lo.seq.busy && !cl.holdsLockState(lo):
				// A lock-owner with no lock state has no established
				// lock_seqid (RFC 7530 16.10.4): its first LOCKs were
				// refused, and the client starts it again (Linux with
				// lock_seqid 0, the same owner). This request begins
				// its sequence.
				lo.seq = seqOwner{seqid: l.OpenOwner.LockSeqid}
			case lo.seq.busy || l.OpenOwner.LockSeqid != lo.seq.seqid+1:
				// A known lock-owner's first lock state on this file: its
				// seqid must be the owner's next one, which this request
				// uses.
				return nil, false, nfsv4.NFS4ERR_BAD_SEQID
			default:
				lo.seq.seqid, lo.seq.reply = l.OpenOwner.LockSeqid, nil
			}
		}
		if ls = o.locks[lo]; ls != nil {
			return ls, false, nfsv4.NFS4_OK
		}
		ls = &lockState{other: t.newOther(cl), seq: 1, owner: lo, open: o, ino: o.ino}
		o.locks[lo] = ls
		t.states[ls.other] = ls
		return ls, true, nfsv4.NFS4_OK
	case *nfsv4.Locker4_FALSE:
		t.mu.Lock()
		defer t.mu.Unlock()
		ls, st := seqStateOf[*lockState](q, l.LockOwner.LockStateid, l.LockOwner.LockSeqid)
		return ls, false, st
	}
	return nil, false, nfsv4.NFS4ERR_INVAL
}

// holdsLockState reports whether lock-owner lo has a lock state on any
// open of cl. Requires the table mutex.
func (cl *client) holdsLockState(lo *lockOwner) bool {
	for _, op := range cl.opens {
		if op.locks[lo] != nil {
			return true
		}
	}
	return false
}

// dropFresh forgets a lock state made by a LOCK that then failed.
func (q *request) dropFresh(ls *lockState, fresh bool) {
	if !fresh {
		return
	}
	t := q.s.state
	t.mu.Lock()
	delete(t.states, ls.other)
	delete(ls.open.locks, ls.owner)
	t.mu.Unlock()
}

func (q *request) lockt(a *nfsv4.Lockt4args) nfsv4.Lockt4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Lockt4res { return &nfsv4.Lockt4res_default{Status: st} }
	l, st := q.lockArgs(a.Locktype, a.Offset, a.Length)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	t := q.s.state
	t.mu.Lock()
	cl, st := q.clientFor(a.Owner.Clientid)
	if st == nfsv4.NFS4_OK {
		st = t.noNewState() // a lock not yet reclaimed would not show
	}
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return fail(st)
	}
	owner := locks.Owner{ID: math.MaxUint64, Client: cl.id} // an owner with no locks
	if lo := cl.lockOwners[string(a.Owner.Owner)]; lo != nil {
		owner = lo.vfsOwner()
	}
	t.mu.Unlock()
	l.Owner = owner
	switch _, conflict, err := q.s.fs.TestLock(q.ctx, q.cur, l); {
	case err != nil:
		return fail(statusOf(err))
	case conflict:
		return &nfsv4.Lockt4res_NFS4ERR_DENIED{Denied: q.s.denied(q.ctx, q.cur, l)}
	}
	return fail(nfsv4.NFS4_OK)
}

func (q *request) locku(a *nfsv4.Locku4args) nfsv4.Locku4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Locku4res { return &nfsv4.Locku4res_default{Status: st} }
	l, st := q.lockArgs(a.Locktype, a.Offset, a.Length)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	t := q.s.state
	t.mu.Lock()
	ls, st := seqStateOf[*lockState](q, a.LockStateid, a.Seqid)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return fail(st)
	}
	l.Kind, l.Owner = locks.Unlock, ls.owner.vfsOwner()
	t.mu.Unlock()
	if err := q.s.fs.SetLock(q.ctx, ls.ino, l, false); err != nil {
		return fail(statusOf(err))
	}
	t.mu.Lock()
	ls.seq = bumpSeq(ls.seq)
	res := sid(ls.other, ls.seq)
	t.mu.Unlock()
	q.setCurSid(res)
	return &nfsv4.Locku4res_NFS4_OK{LockStateid: res}
}

// releaseLockowner (4.0) forgets a lock-owner that holds no locks; one
// that still holds some is refused with NFS4ERR_LOCKS_HELD and kept (RFC
// 7530 16.37.4).
func (q *request) releaseLockowner(o *nfsv4.StateOwner4) nfsv4.Nfsstat4 {
	t := q.s.state
	t.mu.Lock()
	cl, st := q.clientFor(o.Clientid)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return st
	}
	lo := cl.lockOwners[string(o.Owner)]
	if lo == nil {
		t.mu.Unlock()
		return nfsv4.NFS4_OK
	}
	var inos []vfs.Ino
	for _, op := range cl.opens {
		if ls := op.locks[lo]; ls != nil {
			inos = append(inos, ls.ino)
		}
	}
	t.mu.Unlock()
	for _, ino := range inos {
		if q.s.fs.HoldsLocks(ino, lo.vfsOwner()) {
			return nfsv4.NFS4ERR_LOCKS_HELD
		}
	}
	t.mu.Lock()
	if cl.lockOwners[lo.key] == lo {
		for _, op := range cl.opens {
			if ls := op.locks[lo]; ls != nil {
				delete(op.locks, lo)
				delete(t.states, ls.other)
			}
		}
		delete(cl.lockOwners, lo.key)
		delete(t.lockOwners, lo.id)
	}
	t.mu.Unlock()
	return nfsv4.NFS4_OK
}

// locksDropped reports whether another server of the file system dropped
// the locks of this server's earlier run on ino (meta's LocksDropped).
func (s *Server) locksDropped(ctx context.Context, ino vfs.Ino) (bool, error) {
	if !s.fs.Shared() {
		return false, nil
	}
	return s.fs.Meta().LocksDropped(ctx, ino, s.identity)
}

// lockReclaimable checks a lock reclaim of l on ino beyond the grace
// period's rules (grace.go): where another server dropped the earlier
// run's locks, it may have granted, and released, a conflicting lock
// since, so the reclaim is refused: NFS4ERR_RECLAIM_CONFLICT if a
// conflicting lock is held now, else NFS4ERR_NO_GRACE.
func (s *Server) lockReclaimable(ctx context.Context, ino vfs.Ino, l locks.Lock) nfsv4.Nfsstat4 {
	dropped, err := s.locksDropped(ctx, ino)
	if err != nil {
		return statusOf(err)
	}
	if !dropped {
		return nfsv4.NFS4_OK
	}
	_, conflict, err := s.fs.TestLock(ctx, ino, l)
	switch {
	case err != nil:
		return statusOf(err)
	case conflict:
		return nfsv4.NFS4ERR_RECLAIM_CONFLICT
	}
	return nfsv4.NFS4ERR_NO_GRACE
}
