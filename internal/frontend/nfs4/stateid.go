package nfs4

import (
	"context"
	"encoding/binary"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

var (
	anonOther   [12]byte
	bypassOther = [12]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// resolveSid substitutes the 4.1 current stateid (seqid 1, other zero).
func (q *request) resolveSid(s nfsv4.Stateid4) (nfsv4.Stateid4, nfsv4.Nfsstat4) {
	if q.minor >= 1 && s.Seqid == 1 && s.Other == anonOther {
		if !q.hasCurSid {
			return s, nfsv4.NFS4ERR_BAD_STATEID
		}
		return q.curSid, nfsv4.NFS4_OK
	}
	return s, nfsv4.NFS4_OK
}

// isSpecial reports the anonymous (all zeros) and READ bypass (all ones)
// stateids, which carry no state.
func isSpecial(s nfsv4.Stateid4) bool {
	return s.Seqid == 0 && s.Other == anonOther || s.Seqid == 0xffffffff && s.Other == bypassOther
}

// lookupState finds the open or lock state a stateid names, checking its
// seqid, and renews the owning client's lease. Requires t.mu.
func (q *request) lookupState(s nfsv4.Stateid4) (any, nfsv4.Nfsstat4) {
	x, st := q.findState(s)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	if st := q.checkGen(x, s); st != nfsv4.NFS4_OK {
		return nil, st
	}
	return x, nfsv4.NFS4_OK
}

// findState finds the open or lock state a stateid's "other" field names.
// Requires t.mu.
func (q *request) findState(s nfsv4.Stateid4) (any, nfsv4.Nfsstat4) {
	t := q.s.state
	if binary.BigEndian.Uint32(s.Other[:4]) != t.boot {
		if q.minor == 0 {
			return nil, nfsv4.NFS4ERR_STALE_STATEID
		}
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	x, ok := t.states[s.Other]
	if !ok {
		if _, gone := t.gone[stateidClient(s.Other)]; gone {
			return nil, nfsv4.NFS4ERR_EXPIRED
		}
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	if q.client != nil && stateClient(x) != q.client {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	return x, nfsv4.NFS4_OK
}

// checkGen checks a stateid's seqid against the state x it names (4.1's
// seqid 0 means the current one) and renews the owning client's lease.
// Requires t.mu.
func (q *request) checkGen(x any, s nfsv4.Stateid4) nfsv4.Nfsstat4 {
	var seq uint32
	switch v := x.(type) {
	case *openState:
		seq = v.seq
	case *lockState:
		seq = v.seq
	}
	if !(q.minor >= 1 && s.Seqid == 0) {
		if s.Seqid > seq {
			return nfsv4.NFS4ERR_BAD_STATEID
		}
		if s.Seqid < seq {
			return nfsv4.NFS4ERR_OLD_STATEID
		}
	}
	stateClient(x).renew()
	return nfsv4.NFS4_OK
}

// stateClient is the client an open or lock state belongs to.
func stateClient(x any) *client {
	switch v := x.(type) {
	case *openState:
		return v.owner.client
	case *lockState:
		return v.owner.client
	}
	return nil
}

// stateIno is the file an open or lock state is on.
func stateIno(x any) vfs.Ino {
	switch v := x.(type) {
	case *openState:
		return v.ino
	case *lockState:
		return v.ino
	}
	return 0
}

// openOfState is the open state x is, or the open the lock state x
// derives from.
func openOfState(x any) *openState {
	switch v := x.(type) {
	case *openState:
		return v
	case *lockState:
		return v.open
	}
	return nil
}

// openOf returns the open state of a stateid naming an open (or a lock
// derived from one) on the current file.
func (q *request) openOf(s nfsv4.Stateid4) (*openState, nfsv4.Nfsstat4) {
	s, st := q.resolveSid(s)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	x, st := q.lookupState(s)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	o := openOfState(x)
	if o.ino != q.cur {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	return o, nfsv4.NFS4_OK
}

// ioHandle is a handle an I/O operation uses and then gives back with
// done: an open state's, or a temporary one for the special stateids.
type ioHandle struct {
	h    *vfs.Handle
	done func()
}

// handleFor returns a handle for reading (or writing) the current file
// under stateid s, checking the share access the state holds.
func (q *request) handleFor(s nfsv4.Stateid4, write bool) (ioHandle, nfsv4.Nfsstat4) {
	if st := q.needFH(); st != nfsv4.NFS4_OK {
		return ioHandle{}, st
	}
	return q.handleOn(q.cur, s, write)
}

// handleOn is handleFor on file ino (COPY's source is the saved
// filehandle).
func (q *request) handleOn(ino vfs.Ino, s nfsv4.Stateid4, write bool) (ioHandle, nfsv4.Nfsstat4) {
	s, st := q.resolveSid(s)
	if st != nfsv4.NFS4_OK {
		return ioHandle{}, st
	}
	if isSpecial(s) {
		if st := q.s.specialIO(ino, s, write); st != nfsv4.NFS4_OK {
			return ioHandle{}, st
		}
		return q.tempHandle(ino, write)
	}
	t := q.s.state
	t.mu.Lock()
	x, st := q.lookupState(s)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return ioHandle{}, st
	}
	o := openOfState(x)
	if o.ino != ino || o.dead || o.h == nil {
		t.mu.Unlock()
		return ioHandle{}, nfsv4.NFS4ERR_BAD_STATEID
	}
	if write && o.access&nfsv4.OPEN4_SHARE_ACCESS_WRITE == 0 {
		t.mu.Unlock()
		return ioHandle{}, nfsv4.NFS4ERR_OPENMODE
	}
	o.refs++
	h := o.h
	readable := o.access&nfsv4.OPEN4_SHARE_ACCESS_READ != 0 || o.h.Readable()
	t.mu.Unlock()
	if !write && !readable {
		// A write-only open may read what the caller may read (the
		// client reads around partial page writes).
		q.s.unref(o)
		return q.tempHandle(ino, false)
	}
	return ioHandle{h: h, done: func() { q.s.unref(o) }}, nfsv4.NFS4_OK
}

// specialIO checks I/O under a special stateid, which holds no share
// reservation of its own: a READ with the bypass stateid always may; any
// other waits out the grace period (a reservation not yet reclaimed could
// forbid it) and is NFS4ERR_LOCKED when an open denies its kind of access
// (RFC 7530 9.1.4.3, RFC 8881 8.2.3).
func (s *Server) specialIO(ino vfs.Ino, sid nfsv4.Stateid4, write bool) nfsv4.Nfsstat4 {
	if !write && sid.Other == bypassOther {
		return nfsv4.NFS4_OK
	}
	deny := uint32(nfsv4.OPEN4_SHARE_DENY_READ)
	if write {
		deny = nfsv4.OPEN4_SHARE_DENY_WRITE
	}
	if st := s.deniedHere(ino, deny); st != nfsv4.NFS4_OK {
		return st
	}
	switch denied, err := s.fs.DeniedElsewhere(context.Background(), ino, deny); {
	case err != nil:
		return statusOf(err)
	case denied:
		return nfsv4.NFS4ERR_LOCKED
	}
	return nfsv4.NFS4_OK
}

// deniedHere is specialIO's check among this server's opens.
func (s *Server) deniedHere(ino vfs.Ino, deny uint32) nfsv4.Nfsstat4 {
	t := s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.noNewState(); st != nfsv4.NFS4_OK {
		return st
	}
	for _, o := range t.opensByIno[ino] {
		if o.deny&deny != 0 {
			return nfsv4.NFS4ERR_LOCKED
		}
	}
	return nfsv4.NFS4_OK
}

// tempHandle opens the current file for one operation, with the caller's
// permissions.
func (q *request) tempHandle(ino vfs.Ino, write bool) (ioHandle, nfsv4.Nfsstat4) {
	flags := uint32(syscall.O_RDONLY)
	if write {
		flags = syscall.O_WRONLY
	}
	a, st := q.s.attrOf(q.ctx, ino)
	if st != nfsv4.NFS4_OK {
		return ioHandle{}, st
	}
	if a.IsDir() {
		return ioHandle{}, nfsv4.NFS4ERR_ISDIR
	}
	if !a.IsRegular() {
		return ioHandle{}, nfsv4.NFS4ERR_INVAL
	}
	h, err := q.s.fs.Open(q.ctx, q.cred, ino, flags)
	if err != nil {
		return ioHandle{}, statusOf(err)
	}
	return ioHandle{h: h, done: func() { h.Release(q.ctx) }}, nfsv4.NFS4_OK
}
