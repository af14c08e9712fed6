package nfs4

import (
	"bytes"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// NFSv4.0 orders the OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE, LOCK and
// LOCKU requests of each open-owner and lock-owner by a seqid (RFC 7530
// 9.1): the next seqid runs, the last one again is a
// retransmission answered with the reply it got, anything else is
// NFS4ERR_BAD_SEQID. 4.1 replaces all of this with the session's slots.

// seqOwner is the seqid ordering of one 4.0 state-owner. All fields
// require the table mutex.
type seqOwner struct {
	seqid uint32    // the last seqid the owner used
	busy  bool      // a request with seqid+1 is running
	reply *seqReply // the reply to the request with seqid; nil: none yet
}

// seqReply is the reply a state-owner's last request got, for a
// retransmission of it.
type seqReply struct {
	status nfsv4.Nfsstat4
	res    []byte  // the encoded nfs_resop4
	fh     vfs.Ino // the current filehandle after it (OPEN sets it)
}

// seqReplay is the status an operation returns when checkOwnerSeq found a
// retransmission. It is never sent: run answers with the cached reply.
const seqReplay nfsv4.Nfsstat4 = -1

// newSeqOwner starts the ordering of a new owner whose first request
// carries seqid.
func newSeqOwner(seqid uint32) seqOwner { return seqOwner{seqid: seqid - 1} }

// checkOwnerSeq applies 4.0 seqid ordering to a state-owner. The next
// seqid makes so the request's sequenced owner, whose seqid advances and
// reply is kept when the operation ends (finishSeq); the last seqid again
// returns seqReplay with q.replay set. Requires the table mutex.
func (q *request) checkOwnerSeq(so *seqOwner, seqid uint32) nfsv4.Nfsstat4 {
	if q.minor >= 1 {
		return nfsv4.NFS4_OK
	}
	switch {
	case so.busy:
		// The previous request is still running: a 4.0 client sends one
		// request per owner at a time, so this is its retransmission.
		return nfsv4.NFS4ERR_DELAY
	case seqid == so.seqid && so.reply != nil:
		q.replay = so.reply
		return seqReplay
	case seqid == so.seqid+1:
		so.busy = true
		q.seqOwner, q.seqNext = so, seqid
		return nfsv4.NFS4_OK
	}
	return nfsv4.NFS4ERR_BAD_SEQID
}

// seqidMutating reports whether a status ends a sequenced request so that
// the owner's seqid advances: all but the few errors RFC 7530 9.1 lists,
// which say the request never reached the owner.
func seqidMutating(st nfsv4.Nfsstat4) bool {
	switch st {
	case nfsv4.NFS4ERR_STALE_CLIENTID, nfsv4.NFS4ERR_STALE_STATEID, nfsv4.NFS4ERR_BAD_STATEID,
		nfsv4.NFS4ERR_BAD_SEQID, nfsv4.NFS4ERR_BADXDR, nfsv4.NFS4ERR_RESOURCE,
		nfsv4.NFS4ERR_NOFILEHANDLE, nfsv4.NFS4ERR_MOVED:
		return false
	}
	return true
}

// finishSeq ends the sequenced request of the operation that just ran:
// the owner's seqid advances and keeps res as the reply to repeat, unless
// st says the request did not count.
func (q *request) finishSeq(res opResult, st nfsv4.Nfsstat4) {
	so := q.seqOwner
	if so == nil {
		return
	}
	q.seqOwner = nil
	var enc []byte
	if seqidMutating(st) {
		var b bytes.Buffer
		res.WriteTo(&b)
		enc = b.Bytes()
	}
	t := q.s.state
	t.mu.Lock()
	so.busy = false
	if enc != nil {
		so.seqid = q.seqNext
		so.reply = &seqReply{status: st, res: enc, fh: q.cur}
	}
	t.mu.Unlock()
}

// seqState finds the open or lock state a sequenced 4.0 operation names
// and orders the request by its owner's seqid, in RFC 7530's order: the
// stateid's "other" field first, then the seqid, then the stateid's own
// seqid, since a retransmission still carries the stateid as it was
// before the request it repeats. A stateid the owner's last CLOSE ended
// still finds the owner, so that a retransmitted CLOSE is answered.
// Requires the table mutex.
func (q *request) seqState(s nfsv4.Stateid4, seqid uint32) (any, nfsv4.Nfsstat4) {
	x, st := q.findState(s)
	if st != nfsv4.NFS4_OK {
		if oo := q.s.state.closed[s.Other]; oo != nil && q.minor == 0 &&
			seqid == oo.seq.seqid && oo.seq.reply != nil && !oo.seq.busy {
			q.replay = oo.seq.reply
			return nil, seqReplay
		}
		return nil, st
	}
	if st := q.checkOwnerSeq(ownerSeq(x), seqid); st != nfsv4.NFS4_OK {
		return nil, st
	}
	if st := q.checkGen(x, s); st != nfsv4.NFS4_OK {
		return nil, st
	}
	return x, nfsv4.NFS4_OK
}

// seqStateOf is seqState for the operations that name a state of kind T
// (*openState or *lockState) on the current file, after resolveSid: a
// state of the other kind or on another file is NFS4ERR_BAD_STATEID.
// Requires the table mutex.
func seqStateOf[T *openState | *lockState](q *request, s nfsv4.Stateid4, seqid uint32) (T, nfsv4.Nfsstat4) {
	s, st := q.resolveSid(s)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	x, st := q.seqState(s, seqid)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	v, ok := x.(T)
	if !ok || stateIno(x) != q.cur {
		return nil, nfsv4.NFS4ERR_BAD_STATEID
	}
	return v, nfsv4.NFS4_OK
}

// ownerSeq is the seqid ordering of the owner of an open or lock state.
func ownerSeq(x any) *seqOwner {
	switch v := x.(type) {
	case *openState:
		return &v.owner.seq
	case *lockState:
		return &v.owner.seq
	}
	return nil
}
