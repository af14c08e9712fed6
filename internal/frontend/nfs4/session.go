package nfs4

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// session is a 4.1 session: a fore channel with a slot table. Each slot
// remembers the sequence id of its last request and, when it was small
// enough, that request's whole COMPOUND reply, which answers a
// retransmission.
type session struct {
	id     [16]byte
	client *client
	slots  []slot
	fore   nfsv4.ChannelAttrs4
	back   nfsv4.ChannelAttrs4
}

type slot struct {
	seq   uint32
	busy  bool
	reply []byte // nil: not cached
}

// exchangeID registers a 4.1 client (RFC 8881 18.35), non-pNFS.
func (q *request) exchangeID(a *nfsv4.ExchangeId4args) nfsv4.ExchangeId4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.ExchangeId4res { return &nfsv4.ExchangeId4res_default{EirStatus: st} }
	if _, ok := a.EiaStateProtect.(*nfsv4.StateProtect4A_SP4_NONE); !ok {
		return fail(nfsv4.NFS4ERR_ENCR_ALG_UNSUPP)
	}
	const known = nfsv4.EXCHGID4_FLAG_SUPP_MOVED_REFER | nfsv4.EXCHGID4_FLAG_SUPP_MOVED_MIGR |
		nfsv4.EXCHGID4_FLAG_BIND_PRINC_STATEID | nfsv4.EXCHGID4_FLAG_USE_NON_PNFS |
		nfsv4.EXCHGID4_FLAG_USE_PNFS_MDS | nfsv4.EXCHGID4_FLAG_USE_PNFS_DS |
		nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A | nfsv4.EXCHGID4_FLAG_SUPP_FENCE_OPS
	if a.EiaFlags&^uint32(known) != 0 {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	key := "4.1:" + string(a.EiaClientowner.CoOwnerid)
	t := q.s.state
	t.mu.Lock()
	res, replaced := q.exchangeIDLocked(a, key)
	t.mu.Unlock()
	if replaced != nil {
		// Nothing of it to release but its stable-storage record (which
		// must not let it reclaim after a restart).
		q.s.forgetClient(replaced)
		q.s.releaseClient(replaced.id, nil)
	}
	return res
}

// exchangeIDLocked is EXCHANGE_ID's work on the tables (the cases of RFC
// 8881 18.35.4). It returns, besides the result, another principal's
// record that the request removed (client collision), for its release
// outside the mutex. Requires the table mutex.
//
// A client record is bound to the principal that made it (RFC 8881
// 18.35.4): another principal may not update it (NFS4ERR_PERM) nor
// replace it while it holds state (NFS4ERR_CLID_INUSE), nor take over an
// owner recorded for reclaim during the grace period. Without state it is
// removed at once, so its client id is stale before the new record is
// confirmed (case 3). "State" is what holdsState counts: opens (locks
// live under them) and sessions too, as Linux's nfsd counts them; the RFC
// speaks of state without listing it, and a client with a live session
// is in use even while it holds no open.
func (q *request) exchangeIDLocked(a *nfsv4.ExchangeId4args, key string) (nfsv4.ExchangeId4res, *client) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.ExchangeId4res, *client) {
		return &nfsv4.ExchangeId4res_default{EirStatus: st}, nil
	}
	t := q.s.state
	flags := uint32(nfsv4.EXCHGID4_FLAG_USE_NON_PNFS)
	conf := t.confirmed[key]
	principal := q.principal
	upd := a.EiaFlags&nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0
	var cl, replaced *client
	switch {
	case conf != nil && conf.principal != principal && upd:
		return fail(nfsv4.NFS4ERR_PERM)
	case conf != nil && conf.principal != principal && conf.holdsState():
		return fail(nfsv4.NFS4ERR_CLID_INUSE)
	case t.inGrace(time.Now()) && t.grace.reclaimable[key] != "" && t.grace.reclaimable[key] != principal:
		return fail(nfsv4.NFS4ERR_CLID_INUSE)
	case conf != nil && conf.principal == principal && conf.verifier == a.EiaClientowner.CoVerifier:
		cl = conf
		flags |= nfsv4.EXCHGID4_FLAG_CONFIRMED_R
	case upd:
		if conf == nil {
			return fail(nfsv4.NFS4ERR_NOENT)
		}
		return fail(nfsv4.NFS4ERR_NOT_SAME)
	default:
		if conf != nil && conf.principal != principal {
			// A collision with a record that holds nothing: it goes now.
			t.removeClient(conf)
			replaced = conf
		}
		// A new client, or a rebooted one (its old record goes when the
		// new one is confirmed by CREATE_SESSION).
		if old := t.unconfirmed[key]; old != nil {
			t.removeClient(old)
		}
		cl = q.s.newClient(key, a.EiaClientowner.CoVerifier, true)
		cl.principal = principal
		t.unconfirmed[key] = cl
	}
	cl.renew()
	return &nfsv4.ExchangeId4res_NFS4_OK{EirResok4: nfsv4.ExchangeId4resok{
		EirClientid:     cl.id,
		EirSequenceid:   cl.csSeq,
		EirFlags:        flags,
		EirStateProtect: &nfsv4.StateProtect4R_SP4_NONE{},
		EirServerOwner:  nfsv4.ServerOwner4{SoMinorId: 0, SoMajorId: q.s.serverOwner()},
		EirServerScope:  q.s.serverScope(),
		EirServerImplId: []nfsv4.NfsImplId4{{NiiDomain: "bucketfs", NiiName: "bucketfs nfs4"}},
	}}, replaced
}

// newClient makes a client record. Requires the table mutex.
func (s *Server) newClient(key string, verf [8]byte, minor41 bool) *client {
	t := s.state
	cl := &client{id: t.newID(), key: key, verifier: verf, minor41: minor41, csSeq: 1,
		lastRenew: time.Now(), sessions: map[[16]byte]*session{},
		openOwners: map[string]*openOwner{}, lockOwners: map[string]*lockOwner{},
		opens: map[openKey]*openState{}}
	t.clients[cl.id] = cl
	return cl
}

// createSession confirms a client and gives it a session (RFC 8881 18.36).
func (q *request) createSession(a *nfsv4.CreateSession4args) nfsv4.CreateSession4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.CreateSession4res {
		return &nfsv4.CreateSession4res_default{CsrStatus: st}
	}
	t := q.s.state
	t.mu.Lock()
	cl := t.clients[a.CsaClientid]
	if cl == nil || !cl.minor41 {
		t.mu.Unlock()
		return fail(nfsv4.NFS4ERR_STALE_CLIENTID)
	}
	if !cl.confirmed && cl.principal != q.principal {
		// Only the principal that made an unconfirmed record confirms
		// it (RFC 8881 18.36.4); the refusal leaves it as it was.
		t.mu.Unlock()
		return fail(nfsv4.NFS4ERR_CLID_INUSE)
	}
	switch {
	case a.CsaSequence == cl.csSeq:
	case a.CsaSequence+1 == cl.csSeq && cl.csLast != nil:
		r := *cl.csLast
		t.mu.Unlock()
		return &nfsv4.CreateSession4res_NFS4_OK{CsrResok4: r}
	default:
		t.mu.Unlock()
		return fail(nfsv4.NFS4ERR_SEQ_MISORDERED)
	}
	const knownFlags = nfsv4.CREATE_SESSION4_FLAG_PERSIST | nfsv4.CREATE_SESSION4_FLAG_CONN_BACK_CHAN |
		nfsv4.CREATE_SESSION4_FLAG_CONN_RDMA
	if a.CsaFlags&^uint32(knownFlags) != 0 {
		t.mu.Unlock()
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	// Channels too small to carry a request and its reply (the fore
	// channel a COMPOUND with SEQUENCE, the back channel a CB_COMPOUND
	// with CB_SEQUENCE and one callback, were there callbacks) are
	// NFS4ERR_TOOSMALL (RFC 8881 18.36.3).
	fc, bc := a.CsaForeChanAttrs, a.CsaBackChanAttrs
	if fc.CaMaxrequests == 0 || fc.CaMaxrequestsize < 256 || fc.CaMaxresponsesize < 256 ||
		bc.CaMaxrequests == 0 || bc.CaMaxrequestsize < 256 || bc.CaMaxresponsesize < 128 || bc.CaMaxoperations < 2 {
		t.mu.Unlock()
		return fail(nfsv4.NFS4ERR_TOOSMALL)
	}
	fore := nfsv4.ChannelAttrs4{
		CaMaxrequestsize:        min(fc.CaMaxrequestsize, maxRecord),
		CaMaxresponsesize:       min(fc.CaMaxresponsesize, maxReply),
		CaMaxresponsesizeCached: min(fc.CaMaxresponsesizeCached, maxCachedReply),
		CaMaxoperations:         min(max(fc.CaMaxoperations, 1), maxOps),
		CaMaxrequests:           min(fc.CaMaxrequests, maxSlots),
	}
	se := &session{client: cl, slots: make([]slot, fore.CaMaxrequests), fore: fore, back: a.CsaBackChanAttrs}
	binary.BigEndian.PutUint32(se.id[:4], t.boot)
	binary.BigEndian.PutUint64(se.id[4:12], t.newID())
	copy(se.id[12:], "bkfs")
	se.back.CaRdmaIrd = nil
	t.sessions[se.id] = se
	cl.sessions[se.id] = se
	oldID, old := t.confirm(cl)
	res := nfsv4.CreateSession4resok{CsrSessionid: se.id, CsrSequence: a.CsaSequence,
		CsrFlags: 0, CsrForeChanAttrs: fore, CsrBackChanAttrs: se.back}
	cl.csLast = &res
	cl.csSeq++
	cl.renew()
	t.mu.Unlock()
	if oldID != 0 {
		q.s.releaseClient(oldID, old)
	}
	return &nfsv4.CreateSession4res_NFS4_OK{CsrResok4: res}
}

// sequence opens a 4.1 request on a session slot (RFC 8881 18.46). A
// retransmission of the slot's last request returns its cached reply.
func (q *request) sequence(a *nfsv4.Sequence4args) (opResult, nfsv4.Nfsstat4, []byte) {
	fail := func(st nfsv4.Nfsstat4) (opResult, nfsv4.Nfsstat4, []byte) {
		return &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_default{SrStatus: st}}, st, nil
	}
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	se := t.sessions[a.SaSessionid]
	if se == nil {
		return fail(nfsv4.NFS4ERR_BADSESSION)
	}
	// The request must keep to the limits the session negotiated (RFC
	// 8881 18.46.3), checked before the slot is used.
	if q.count > se.fore.CaMaxoperations {
		return fail(nfsv4.NFS4ERR_TOO_MANY_OPS)
	}
	if q.reqSize > int(se.fore.CaMaxrequestsize) {
		return fail(nfsv4.NFS4ERR_REQ_TOO_BIG)
	}
	if a.SaSlotid >= uint32(len(se.slots)) {
		return fail(nfsv4.NFS4ERR_BADSLOT)
	}
	sl := &se.slots[a.SaSlotid]
	switch {
	case a.SaSequenceid == sl.seq && sl.seq != 0:
		if sl.busy {
			return fail(nfsv4.NFS4ERR_DELAY)
		}
		se.client.renew()
		if sl.reply == nil {
			return fail(nfsv4.NFS4ERR_RETRY_UNCACHED_REP)
		}
		return nil, nfsv4.NFS4_OK, bytes.Clone(sl.reply)
	case a.SaSequenceid == sl.seq+1:
		if sl.busy {
			return fail(nfsv4.NFS4ERR_DELAY)
		}
	default:
		return fail(nfsv4.NFS4ERR_SEQ_MISORDERED)
	}
	sl.seq = a.SaSequenceid
	sl.busy = true
	sl.reply = nil
	se.client.renew()
	q.sess, q.slot, q.client, q.cacheThis = se, sl, se.client, a.SaCachethis
	high := uint32(len(se.slots) - 1)
	return &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{
		SrSessionid: se.id, SrSequenceid: a.SaSequenceid, SrSlotid: a.SaSlotid,
		SrHighestSlotid: high, SrTargetHighestSlotid: high,
	}}}, nfsv4.NFS4_OK, nil
}

// releaseSlot ends the request's use of its slot, caching reply when it is
// small enough to keep.
func (q *request) releaseSlot(reply []byte) {
	if q.slot == nil {
		return
	}
	t := q.s.state
	t.mu.Lock()
	if limit := max(q.sess.cachedLimit(), 4096); reply != nil && len(reply) <= limit {
		q.slot.reply = bytes.Clone(reply)
	}
	q.slot.busy = false
	q.client.renew()
	t.mu.Unlock()
	q.slot = nil
}

// cachedLimit is the largest reply the session promised to cache: its
// ca_maxresponsesize_cached, or 4096 bytes for a client that stated none
// (0). Replies up to 4096 bytes are kept even when the client asked for
// less, so that a retransmission finds them.
func (se *session) cachedLimit() int {
	if se.fore.CaMaxresponsesizeCached == 0 {
		return 4096
	}
	return int(se.fore.CaMaxresponsesizeCached)
}

// replyFits checks a reply of size bytes (RPC header included) against the
// session's limits (RFC 8881 2.10.6.4): NFS4ERR_REP_TOO_BIG over
// ca_maxresponsesize, NFS4ERR_REP_TOO_BIG_TO_CACHE over what the slot
// caches when the client asked for the reply to be cached.
func (q *request) replyFits(size int) nfsv4.Nfsstat4 {
	switch {
	case q.sess == nil:
		return nfsv4.NFS4_OK
	case size > int(q.sess.fore.CaMaxresponsesize):
		return nfsv4.NFS4ERR_REP_TOO_BIG
	case q.cacheThis && size > q.sess.cachedLimit():
		return nfsv4.NFS4ERR_REP_TOO_BIG_TO_CACHE
	}
	return nfsv4.NFS4_OK
}

// needSession checks that a 4.1 request runs in a session (4.0 has none).
func (q *request) needSession() nfsv4.Nfsstat4 {
	if q.minor >= 1 && q.sess == nil {
		return nfsv4.NFS4ERR_OP_NOT_IN_SESSION
	}
	return nfsv4.NFS4_OK
}

func (q *request) destroySession(id [16]byte) nfsv4.Nfsstat4 {
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	se := t.sessions[id]
	if se == nil {
		return nfsv4.NFS4ERR_BADSESSION
	}
	delete(t.sessions, id)
	delete(se.client.sessions, id)
	return nfsv4.NFS4_OK
}

// bindConn binds the connection to a session. There is no back channel,
// but a client asking for "fore or both" must hear BOTH or it drops the
// connection.
func (q *request) bindConn(a *nfsv4.BindConnToSession4args) nfsv4.BindConnToSession4res {
	t := q.s.state
	t.mu.Lock()
	se := t.sessions[a.BctsaSessid]
	if se != nil {
		se.client.renew()
	}
	t.mu.Unlock()
	if se == nil {
		return &nfsv4.BindConnToSession4res_default{BctsrStatus: nfsv4.NFS4ERR_BADSESSION}
	}
	var dir nfsv4.ChannelDirFromServer4
	switch a.BctsaDir {
	case nfsv4.CDFC4_FORE:
		dir = nfsv4.CDFS4_FORE
	case nfsv4.CDFC4_FORE_OR_BOTH, nfsv4.CDFC4_BACK_OR_BOTH:
		dir = nfsv4.CDFS4_BOTH
	default:
		return &nfsv4.BindConnToSession4res_default{BctsrStatus: nfsv4.NFS4ERR_INVAL}
	}
	return &nfsv4.BindConnToSession4res_NFS4_OK{BctsrResok4: nfsv4.BindConnToSession4resok{
		BctsrSessid: se.id, BctsrDir: dir}}
}

// destroyClientID forgets a client with no sessions and no opens (which
// hold any locks it has): RFC 8881 18.50.3 has a client with either
// refused with NFS4ERR_CLIENTID_BUSY.
func (q *request) destroyClientID(id uint64) nfsv4.Nfsstat4 {
	t := q.s.state
	t.mu.Lock()
	cl := t.clients[id]
	switch {
	case cl == nil || !cl.minor41:
		t.mu.Unlock()
		return nfsv4.NFS4ERR_STALE_CLIENTID
	case len(cl.sessions) > 0 || len(cl.opens) > 0:
		t.mu.Unlock()
		return nfsv4.NFS4ERR_CLIENTID_BUSY
	}
	t.mu.Unlock()
	q.s.expire(cl)
	return nfsv4.NFS4_OK
}

// reclaimComplete ends the client's reclaims (RFC 8881 18.51): it may
// reclaim nothing more, and once every client recorded by the previous
// instance has sent it the grace period ends (grace.go). A second one is
// NFS4ERR_COMPLETE_ALREADY. One for a single file system (rca_one_fs, after
// a migration) is accepted and changes nothing: this server has one file
// system and never migrates it.
func (q *request) reclaimComplete(oneFS bool) nfsv4.Nfsstat4 {
	if q.sess == nil {
		return nfsv4.NFS4ERR_OP_NOT_IN_SESSION
	}
	if oneFS {
		return nfsv4.NFS4_OK
	}
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	cl := q.client
	if cl.reclaimDone {
		return nfsv4.NFS4ERR_COMPLETE_ALREADY
	}
	cl.reclaimDone = true
	if t.heldOnBehalf(cl) {
		t.grace.completed[cl.key] = true
	}
	return nfsv4.NFS4_OK
}

func (q *request) testStateid(sids []nfsv4.Stateid4) nfsv4.TestStateid4res {
	t := q.s.state
	codes := make([]nfsv4.Nfsstat4, 0, len(sids))
	t.mu.Lock()
	for _, s := range sids {
		if isSpecial(s) {
			codes = append(codes, nfsv4.NFS4ERR_BAD_STATEID)
			continue
		}
		_, st := q.lookupState(s)
		codes = append(codes, st)
	}
	t.mu.Unlock()
	return &nfsv4.TestStateid4res_NFS4_OK{TsrResok4: nfsv4.TestStateid4resok{TsrStatusCodes: codes}}
}

// freeStateid forgets a lock stateid under which no locks remain (RFC
// 8881 18.38.3); one with locks, and an open stateid (which must be
// closed instead), get NFS4ERR_LOCKS_HELD.
func (q *request) freeStateid(s nfsv4.Stateid4) nfsv4.Nfsstat4 {
	s, st := q.resolveSid(s)
	if st != nfsv4.NFS4_OK {
		return st
	}
	t := q.s.state
	t.mu.Lock()
	x, st := q.lookupState(s)
	if st != nfsv4.NFS4_OK {
		t.mu.Unlock()
		return st
	}
	l, ok := x.(*lockState)
	t.mu.Unlock()
	if !ok || q.s.fs.HoldsLocks(l.ino, l.owner.vfsOwner()) {
		return nfsv4.NFS4ERR_LOCKS_HELD
	}
	t.mu.Lock()
	if t.states[l.other] == l {
		delete(t.states, l.other)
		delete(l.open.locks, l.owner)
	}
	t.mu.Unlock()
	return nfsv4.NFS4_OK
}
