package nfs4

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"runtime/debug"
	"unicode/utf8"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// request is the state of one COMPOUND as its operations run: who calls,
// the current and saved filehandles and stateids, and (4.1) the session
// slot the request holds.
type request struct {
	s    *Server
	ctx  context.Context
	conn *conn
	// cred is the identity operations run as: the current filehandle's
	// access point's, or else the caller's own (caller).
	cred   vfs.Cred
	caller vfs.Cred
	minor  uint32
	// principal is the caller's, for client records (auth.go).
	principal string

	cur, saved       vfs.Ino      // 0: no filehandle
	curAP, savedAP   *accessPoint // the access point cur and saved were reached through, if any
	curSid, savedSid nfsv4.Stateid4
	hasCurSid        bool
	hasSavedSid      bool

	// 4.1: the session and slot of the SEQUENCE that opened the request,
	// and whether it asked for its reply to be cached (sa_cachethis).
	sess      *session
	slot      *slot
	client    *client
	cacheThis bool

	// The COMPOUND's size: its operation count and the RPC record's
	// bytes (checked against the session's limits by SEQUENCE).
	count   uint32
	reqSize int

	// 4.0: the state-owner whose seqid the running operation consumes
	// and the seqid it consumes (seqid.go), or the cached reply that
	// answers a retransmitted one.
	seqOwner *seqOwner
	seqNext  uint32
	replay   *seqReply
}

// operation is one decoded operation: a go-xdr nfsv4.NfsArgop4 or, for
// the operations go-xdr does not know, an *xattrArgs.
type operation interface {
	GetArgop() nfsv4.NfsOpnum4
}

// opResult is one operation result, to be encoded.
type opResult interface {
	WriteTo(io.Writer) (int64, error)
	GetEncodedSizeBytes() int
}

// encodedResult is an operation result encoded already: by hand (the
// operations go-xdr does not know) or earlier (a 4.0 reply replayed from
// an owner's cache).
type encodedResult []byte

func (r encodedResult) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r)
	return int64(n), err
}

func (r encodedResult) GetEncodedSizeBytes() int { return len(r) }

// rawResult is an operation result that is only a status: every result
// union's error arm has this form.
type rawResult struct {
	op     nfsv4.NfsOpnum4
	status nfsv4.Nfsstat4
}

func (r rawResult) WriteTo(w io.Writer) (int64, error) {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:], uint32(r.op))
	binary.BigEndian.PutUint32(b[4:], uint32(r.status))
	m, err := w.Write(b[:r.GetEncodedSizeBytes()])
	return int64(m), err
}

func (r rawResult) GetEncodedSizeBytes() int {
	if r.op == nfsv4.OP_SETATTR {
		return 12 // SETATTR4res is a struct: an empty attrsset follows
	}
	return 8
}

// rpcReplyHeader is the size of an accepted RPC reply's header with an
// AUTH_NONE verifier: what a COMPOUND reply adds to its results.
const rpcReplyHeader = 24

// compound decodes and runs one COMPOUND, operation by operation, and
// returns its encoded COMPOUND4res. reqSize is the size of the RPC
// message that carried args. ok is false when not even the header decodes
// (the RPC layer answers GARBAGE_ARGS).
func (s *Server) compound(ctx context.Context, c *conn, who caller, args []byte, reqSize int) (res []byte, ok bool) {
	r := bytes.NewReader(args)
	x := xdrReader{b: args}
	tag := x.opaque(nfsv4.NFS4_OPAQUE_LIMIT)
	minor := x.u32()
	count := x.u32()
	if x.err != nil {
		return nil, false
	}
	r.Seek(int64(len(args)-len(x.b)), io.SeekStart)
	if !utf8.Valid(tag) {
		return encodeCompound(nil, nfsv4.NFS4ERR_INVAL, nil), true
	}
	if minor > 2 {
		return encodeCompound(tag, nfsv4.NFS4ERR_MINOR_VERS_MISMATCH, nil), true
	}
	if count > maxOps {
		st := nfsv4.Nfsstat4(nfsv4.NFS4ERR_RESOURCE)
		if minor > 0 {
			st = nfsv4.NFS4ERR_TOO_MANY_OPS
		}
		return encodeCompound(tag, st, nil), true
	}
	q := &request{s: s, ctx: ctx, conn: c, cred: who.cred, caller: who.cred, principal: who.principal, minor: minor, count: count, reqSize: reqSize}
	defer q.releaseSlot(nil)
	var results []opResult
	size := rpcReplyHeader + 12 + (len(tag)+3)&^3 // status, tag, result count
	status := nfsv4.Nfsstat4(nfsv4.NFS4_OK)
	for i := uint32(0); i < count && status == nfsv4.NFS4_OK; i++ {
		if r.Len() < 4 {
			results = append(results, rawResult{nfsv4.OP_ILLEGAL, nfsv4.NFS4ERR_BADXDR})
			status = nfsv4.NFS4ERR_BADXDR
			break
		}
		var opb [4]byte
		r.Read(opb[:])
		opnum := nfsv4.NfsOpnum4(binary.BigEndian.Uint32(opb[:]))
		if !known(minor, opnum) {
			results = append(results, rawResult{nfsv4.OP_ILLEGAL, nfsv4.NFS4ERR_OP_ILLEGAL})
			status = nfsv4.NFS4ERR_OP_ILLEGAL
			break
		}
		var (
			op  operation
			err error
		)
		if isXattrOp(opnum) {
			// go-xdr does not know RFC 8276's operations (xattr.go).
			var n int
			op, n, err = decodeXattrArgs(opnum, args[len(args)-r.Len():])
			r.Seek(int64(n), io.SeekCurrent)
		} else {
			r.Seek(-4, io.SeekCurrent)
			op, _, err = nfsv4.ReadNfsArgop4(r)
		}
		if err != nil {
			results = append(results, rawResult{opnum, nfsv4.NFS4ERR_BADXDR})
			status = nfsv4.NFS4ERR_BADXDR
			break
		}
		if st := q.sessionRule(i, count, opnum); st != nfsv4.NFS4_OK {
			results = append(results, rawResult{opnum, st})
			status = st
			break
		}
		var (
			res    opResult
			cached []byte
		)
		res, status, cached = q.run(op)
		if cached != nil {
			// A retransmitted request answered from the slot's cache.
			return cached, true
		}
		size += res.GetEncodedSizeBytes()
		if st := q.replyFits(size); st != nfsv4.NFS4_OK {
			// The operation ran, but its reply does not fit the session:
			// a client asks for no more than it can take, so this is a
			// READ, READDIR or GETATTR of more than the reply allows.
			res, status = rawResult{opnum, st}, st
		}
		results = append(results, res)
	}
	out := encodeCompound(tag, status, results)
	q.releaseSlot(out)
	return out, true
}

// run executes one operation, turning a panic into NFS4ERR_SERVERFAULT.
// A 4.0 operation that repeats its owner's last seqid is answered with
// the reply that request got; one that consumes the next seqid keeps its
// reply for such a repeat.
func (q *request) run(op operation) (res opResult, st nfsv4.Nfsstat4, cached []byte) {
	q.seqOwner, q.replay = nil, nil
	defer func() {
		if p := recover(); p != nil {
			q.s.log.Error("panic in NFS operation", "op", op.GetArgop(), "panic", p, "stack", string(debug.Stack()))
			res, st, cached = rawResult{op.GetArgop(), nfsv4.NFS4ERR_SERVERFAULT}, nfsv4.NFS4ERR_SERVERFAULT, nil
		}
		q.finishSeq(res, st)
	}()
	if seq, ok := op.(*nfsv4.NfsArgop4_OP_SEQUENCE); ok {
		return q.sequence(&seq.Opsequence)
	}
	res, st = q.dispatch(op)
	if r := q.replay; r != nil {
		if r.fh != 0 {
			q.setCur(r.fh)
		}
		return encodedResult(r.res), r.status, nil
	}
	return res, st, nil
}

// encodeCompound encodes a COMPOUND4res.
func encodeCompound(tag []byte, status nfsv4.Nfsstat4, results []opResult) []byte {
	var b xdrBuf
	b.u32(uint32(status))
	b.opaque(tag)
	b.u32(uint32(len(results)))
	buf := bytes.NewBuffer(b)
	for _, r := range results {
		r.WriteTo(buf)
	}
	return buf.Bytes()
}

// known reports whether minor version minor defines operation op.
func known(minor uint32, op nfsv4.NfsOpnum4) bool {
	switch {
	case op == nfsv4.OP_ILLEGAL:
		return true
	case op >= nfsv4.OP_ACCESS && op <= nfsv4.OP_RELEASE_LOCKOWNER:
		return true
	case op >= nfsv4.OP_BACKCHANNEL_CTL && op <= nfsv4.OP_RECLAIM_COMPLETE:
		return minor >= 1
	case op >= nfsv4.OP_ALLOCATE && op <= nfsv4.OP_CLONE:
		return minor >= 2
	case isXattrOp(op): // RFC 8276
		return minor >= 2
	}
	return false
}

// sessionRule enforces where 4.1 operations may appear: SEQUENCE first,
// and the operations that create or destroy sessions alone.
func (q *request) sessionRule(i, count uint32, op nfsv4.NfsOpnum4) nfsv4.Nfsstat4 {
	if q.minor == 0 || op == nfsv4.OP_ILLEGAL {
		return nfsv4.NFS4_OK // OP_ILLEGAL is no operation: it answers NFS4ERR_OP_ILLEGAL anywhere
	}
	switch op {
	case nfsv4.OP_SETCLIENTID, nfsv4.OP_SETCLIENTID_CONFIRM, nfsv4.OP_RENEW,
		nfsv4.OP_OPEN_CONFIRM, nfsv4.OP_RELEASE_LOCKOWNER:
		return nfsv4.NFS4ERR_NOTSUPP
	}
	if i == 0 {
		switch op {
		case nfsv4.OP_SEQUENCE:
			return nfsv4.NFS4_OK
		case nfsv4.OP_EXCHANGE_ID, nfsv4.OP_CREATE_SESSION, nfsv4.OP_BIND_CONN_TO_SESSION,
			nfsv4.OP_DESTROY_SESSION, nfsv4.OP_DESTROY_CLIENTID:
			if count > 1 {
				return nfsv4.NFS4ERR_NOT_ONLY_OP
			}
			return nfsv4.NFS4_OK
		}
		return nfsv4.NFS4ERR_OP_NOT_IN_SESSION
	}
	if op == nfsv4.OP_SEQUENCE {
		return nfsv4.NFS4ERR_SEQUENCE_POS
	}
	return nfsv4.NFS4_OK
}

// needFH checks there is a current filehandle.
func (q *request) needFH() nfsv4.Nfsstat4 {
	if q.cur == 0 {
		return nfsv4.NFS4ERR_NOFILEHANDLE
	}
	return nfsv4.NFS4_OK
}

// curAttr loads the current filehandle's attributes.
func (q *request) curAttr() (vfs.Attr, nfsv4.Nfsstat4) {
	if q.cur == 0 {
		return vfs.Attr{}, nfsv4.NFS4ERR_NOFILEHANDLE
	}
	return q.s.attrOf(q.ctx, q.cur)
}

// setCurSid records the current stateid (4.1) an operation produced.
func (q *request) setCurSid(sid nfsv4.Stateid4) {
	q.curSid, q.hasCurSid = sid, true
}
